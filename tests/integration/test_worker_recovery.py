"""The worker's recovery parts on their own: bounded commit retries, the supervisor of WorkerProcess."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import KafkaError

from tailhound.errors import TailhoundError
from tailhound.settings import Settings
from tailhound.worker.guard import bound_commit_retries
from tailhound.worker.process import WorkerProcess


async def test_a_commit_that_keeps_failing_raises_after_the_limit(monkeypatch):
    calls = []

    async def never_commits(self, assignment, offsets):  # aiokafka retries a retriable error forever
        calls.append(offsets)
        await asyncio.sleep(3600)

    monkeypatch.setattr(GroupCoordinator, "commit_offsets", never_commits)
    bound_commit_retries(limit_s=0.2)
    t0 = time.monotonic()
    with pytest.raises(KafkaError, match="did not succeed within"):
        await GroupCoordinator.commit_offsets(object(), None, {"tp": 1})
    assert time.monotonic() - t0 < 2 and calls == [{"tp": 1}]
    bound_commit_retries(limit_s=0.2)  # idempotent: wrapped once
    assert getattr(GroupCoordinator.commit_offsets, "tailhound_bounded", False)


def _fake_start(codes: list[int]):
    def start(self: WorkerProcess) -> None:
        code = codes.pop(0) if codes else 0
        self.proc = subprocess.Popen([sys.executable, "-c", f"import time, sys; time.sleep(0.1); sys.exit({code})"])

    return start


def _supervise_until_settled(worker: WorkerProcess, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not worker.supervise(backoff_s=0.05):
            return False
        time.sleep(0.02)
    return True


def test_supervise_restarts_a_failed_worker_until_it_exits_cleanly(monkeypatch, tmp_path):
    monkeypatch.setattr(WorkerProcess, "start", _fake_start([75, 1, 0]))
    worker = WorkerProcess(Settings(), tmp_path / "w.log", max_restarts=5)
    worker.start()
    assert _supervise_until_settled(worker) is False  # the third one exits 0: nothing to restart
    assert worker.exits == [75, 1] and worker.restarts == 2


def test_supervise_gives_up_after_max_restarts(monkeypatch, tmp_path):
    monkeypatch.setattr(WorkerProcess, "start", _fake_start([1, 1, 1, 1]))
    worker = WorkerProcess(Settings(), tmp_path / "w.log", max_restarts=2)
    worker.start()
    with pytest.raises(TailhoundError, match="failed 3 times"):
        _supervise_until_settled(worker)


@pytest.mark.broker
async def test_a_committed_offset_beyond_the_log_end_reads_the_partition_from_its_start(settings: Settings):
    # what a broker restart leaves: the group's committed offset (66) points past the recreated log's end (5)
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    from tailhound.kafka import ensure_topics, make_consumer, make_producer
    from tailhound.worker.guard import reset_offsets_past_log_end

    await ensure_topics(settings)
    topic = settings.telemetry_topic
    producer = make_producer(settings)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic, value=b"%d" % i, key=b"k", partition=0)
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)
    group = f"{settings.streams.app_id}-offsets"
    committer = make_consumer(settings, group_id=group, enable_auto_commit=False)
    await committer.start()
    committer.assign([tp])
    await committer.commit({tp: OffsetAndMetadata(66, "")})
    await committer.stop()

    original = AIOKafkaConsumer.seek_to_committed
    reset_offsets_past_log_end()
    reset_offsets_past_log_end()  # idempotent
    try:
        consumer = make_consumer(settings, group_id=group, enable_auto_commit=False)
        await consumer.start()
        consumer.assign([tp])
        try:
            assert await consumer.seek_to_committed() == {tp: 0}
            batch = await consumer.getmany(tp, timeout_ms=5000)
            assert [m.value for m in batch.get(tp, [])][:1] == [b"0"]  # nothing skipped
        finally:
            await consumer.stop()
    finally:
        AIOKafkaConsumer.seek_to_committed = original


def test_the_worker_retries_a_send_answered_unknown_as_an_unknown_topic(monkeypatch):
    # the bundled broker answers a send into a topic it lost with error -1; aiokafka then retries it (refreshing
    # its metadata) until the topic guard has declared the topic again, instead of Faust dropping the message
    from aiokafka.errors import UnknownError, UnknownTopicOrPartitionError

    from tailhound.worker.guard import retry_unknown_produce_errors

    monkeypatch.setattr(UnknownError, "retriable", False)
    monkeypatch.setattr(UnknownError, "invalid_metadata", False, raising=False)
    retry_unknown_produce_errors()
    assert UnknownError.retriable and UnknownError.invalid_metadata
    assert UnknownError.retriable == UnknownTopicOrPartitionError.retriable
