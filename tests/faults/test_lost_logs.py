"""Offsets into logs the broker lost (tailhound/worker/lost_logs.py), part by part, on the bundled broker: the
broker-restart drill's missing incident was a stale committed offset inside a recreated log that had already
grown past it (the seek skipped the first snapshots), and its hung worker a Faust recovery waiting on a
recreated changelog."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.structs import OffsetAndMetadata
from faust.tables.recovery import Recovery

from tailhound.kafka import ensure_topics, make_consumer, make_producer
from tailhound.settings import Settings
from tailhound.worker.guard import reset_offsets_past_log_end
from tailhound.worker.lost_logs import (
    LOST,
    UP_TO_DATE,
    LostLogs,
    drop_commits_into_lost_logs,
    skip_recovery_of_lost_changelogs,
    void_offsets,
)

TOPICS = {"t.telemetry", "t.node-incidents", "app-node-state-changelog"}
CHANGELOG = "app-node-state-changelog"


def test_a_topic_counts_as_lost_only_once_it_was_seen():
    lost = LostLogs()
    assert lost.observe({"t.telemetry"}, TOPICS, {CHANGELOG}) == ["app-node-state-changelog", "t.node-incidents"]
    assert not lost.pending()  # a first check: missing, never seen, so not lost (a fresh start)
    lost.observe(TOPICS, TOPICS, {CHANGELOG})
    lost.observe(TOPICS - {"t.node-incidents"}, TOPICS, {CHANGELOG})  # deleted by hand
    assert lost.voids("t.node-incidents") and not lost.voids("t.telemetry") and not lost.everything
    lost.observe({"t.telemetry"}, TOPICS, {CHANGELOG})  # a changelog too: the broker lost everything
    assert lost.everything and lost.voids("t.telemetry")
    lost.read_from_start()
    assert not lost.pending()
    lost.observe(TOPICS, TOPICS, {CHANGELOG})
    lost.observe(TOPICS - {CHANGELOG}, TOPICS, {CHANGELOG})  # declared again and lost again: counts again
    assert lost.everything


@pytest.fixture
def lost(monkeypatch):
    """The process's record, empty, restored afterwards (the seek and commit patches read it)."""
    for name, value in vars(LostLogs()).items():
        monkeypatch.setattr(LOST, name, value)
    return LOST


async def _produce(settings: Settings, topic: str, n: int) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        for i in range(n):
            await producer.send_and_wait(topic, value=b"%d" % i, key=b"k", partition=0)
    finally:
        await producer.stop()


async def _commit(settings: Settings, group: str, tp: TopicPartition, offset: int) -> None:
    committer = make_consumer(settings, group_id=group, enable_auto_commit=False)
    await committer.start()
    try:
        committer.assign([tp])
        await committer.commit({tp: OffsetAndMetadata(offset, "")})
    finally:
        await committer.stop()


async def _committed(settings: Settings, group: str, tp: TopicPartition) -> int | None:
    reader = make_consumer(settings, group_id=group, enable_auto_commit=False)
    await reader.start()
    try:
        return await reader.committed(tp)
    finally:
        await reader.stop()


@pytest.mark.broker
async def test_a_stale_offset_inside_a_recreated_log_is_not_used(settings: Settings, lost, monkeypatch):
    # the drill's case: the group holds 40 from the lost log, the recreated one already has 60: the log-end check
    # alone seeks to 40 and the first 40 snapshots are never seen
    await ensure_topics(settings)
    topic = settings.telemetry_topic
    await _produce(settings, topic, 60)
    tp = TopicPartition(topic, 0)
    group = f"{settings.streams.app_id}-stale"
    await _commit(settings, group, tp, 40)
    lost.observe({topic}, {topic}, set())
    lost.observe(set(), {topic}, set())  # the topic check saw it gone (then it was declared again)

    monkeypatch.setattr(AIOKafkaConsumer, "seek_to_committed", AIOKafkaConsumer.seek_to_committed)
    reset_offsets_past_log_end()
    consumer = make_consumer(settings, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        assert await consumer.seek_to_committed() == {tp: 0}
        assert not lost.pending()  # the assignment read it from its start
        assert await consumer.seek_to_committed() == {tp: 0}  # Faust seeks twice: the group still holds 40
        batch = await consumer.getmany(tp, timeout_ms=5000)
        assert [m.value for m in batch.get(tp, [])][:1] == [b"0"]
    finally:
        await consumer.stop()
    lost.committed([tp])  # once this worker committed it, the group's offset is from the new log
    assert void_offsets({tp: 40}) == []


@pytest.mark.broker
async def test_no_commit_carries_an_offset_into_a_lost_log(settings: Settings, lost, monkeypatch):
    await ensure_topics(settings)
    topic = settings.telemetry_topic
    await _produce(settings, topic, 5)
    tp = TopicPartition(topic, 0)
    group = f"{settings.streams.app_id}-drop"
    monkeypatch.setattr(GroupCoordinator, "_do_commit_offsets", GroupCoordinator._do_commit_offsets)
    drop_commits_into_lost_logs()
    drop_commits_into_lost_logs()  # idempotent
    await _commit(settings, group, tp, 3)
    lost.observe({topic}, {topic}, set())
    lost.observe(set(), {topic}, set())
    await _commit(settings, group, tp, 99)  # an offset of the old log, after the loss: left out
    assert await _committed(settings, group, tp) == 3
    lost.read_from_start([tp])
    await _commit(settings, group, tp, 4)
    assert await _committed(settings, group, tp) == 4 and lost.rereading == set()


def test_a_lost_changelog_is_not_read_back_at_the_assignment(lost, monkeypatch):
    monkeypatch.setattr(Recovery, "_add", Recovery._add)
    skip_recovery_of_lost_changelogs()
    skip_recovery_of_lost_changelogs()  # idempotent
    recovery = SimpleNamespace(tp_to_table={})
    table = SimpleNamespace(persisted_offset=lambda tp: None)
    kept, gone = TopicPartition("other-changelog", 0), TopicPartition(CHANGELOG, 1)
    lost.observe({CHANGELOG, "other-changelog"}, {CHANGELOG, "other-changelog"}, {CHANGELOG})
    lost.observe({"other-changelog"}, {CHANGELOG, "other-changelog"}, {CHANGELOG})
    offsets: dict = {}
    for tp in (kept, gone):
        Recovery._add(recovery, table, tp, offsets)
    # the lost changelog's partition counts as read to its end; every partition once the broker lost everything
    assert offsets == {kept: UP_TO_DATE, gone: UP_TO_DATE}
    lost.read_from_start()
    offsets = {}
    Recovery._add(recovery, table, gone, offsets)
    assert offsets == {gone: None}
