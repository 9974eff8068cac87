"""Snapshots -> real broker -> Faust worker (child process) -> incidents / dead letters."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from tailhound.agents.publisher import SnapshotPublisher
from tailhound.deadletter import DeadLetter
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.kafka_helpers import any_resolved, consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
T0 = 1_767_225_600.0


@pytest.fixture
async def worker(settings, tmp_path):
    await ensure_topics(settings)
    proc = WorkerProcess(settings, tmp_path / "worker.log")
    proc.start()
    yield proc
    proc.stop()
    assert proc.proc is None


def _incidents(records):
    return [IncidentEvent.model_validate_json(r.value) for r in records]


async def test_thermal_incident_reaches_the_incident_topic(settings, worker):
    hot = {3: (88.0, 1100.0), 5: (87.0, 1150.0)}
    async with SnapshotPublisher(settings) as pub:
        for i in range(30):
            await pub.publish(
                [
                    dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=hot if 4 <= i < 20 else None),
                    dcgm_snapshot(T0 + 15 * i, node="gpu-node-1"),
                ]
            )
    records = await consume(settings, settings.incidents_topic, any_resolved, timeout=90, alive=worker.alive)
    assert worker.alive(), worker.log_tail()
    events = _incidents(records)
    assert [e.event for e in events] == ["opened", "resolved"], worker.log_tail()
    opened = events[0]
    assert opened.root_cause == "gpu-thermal-throttle"
    assert opened.scope.node == "gpu-node-2" and opened.scope.gpus == ["3", "5"]
    assert opened.actions and opened.evidence
    assert records[0].key == opened.incident_id.encode()


async def test_malformed_messages_go_to_deadletter_and_the_worker_keeps_running(settings, worker):
    producer = make_producer(settings)
    await producer.start()
    try:
        await producer.send_and_wait(settings.telemetry_topic, key=b"gpu-node-9", value=b"{not json")
        bad = dcgm_snapshot(T0, node="gpu-node-9").model_dump(mode="json")
        bad["samples"][0]["value"] = "hot"
        await producer.send_and_wait(settings.telemetry_topic, key=b"gpu-node-9", value=json.dumps(bad).encode())
        await producer.send_and_wait(
            settings.telemetry_topic,
            key=b"other-node",
            value=dcgm_snapshot(T0, node="gpu-node-9").model_dump_json().encode(),
        )
        await producer.send_and_wait(settings.telemetry_topic, key=b"gpu-node-9", value=b"\xff\xfe binary")
    finally:
        await producer.stop()
    records = await consume(
        settings, settings.deadletter_topic, lambda rs: len(rs) >= 4, timeout=60, alive=worker.alive
    )
    letters = [DeadLetter.model_validate_json(r.value) for r in records]
    assert len(letters) == 4, worker.log_tail()
    reasons = [(d.stage, d.reason) for d in letters]
    assert reasons[0][0] == "validate" and "invalid JSON" in reasons[0][1]
    assert reasons[1][0] == "validate" and "samples.0" in reasons[1][1]
    assert reasons[2][0] == "key" and "other-node" in reasons[2][1]
    assert letters[3].payload_encoding == "base64" and letters[3].original_bytes() == b"\xff\xfe binary"
    assert all(d.topic == settings.telemetry_topic and d.offset is not None for d in letters)

    # still running: a real incident is detected after the bad input
    async with SnapshotPublisher(settings) as pub:
        for i in range(12):
            await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-9", hot={1: (90.0, 1000.0)})])
    records = await consume(settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=60, alive=worker.alive)
    assert worker.alive()
    assert _incidents(records)[0].scope.gpus == ["1"]


async def test_restarted_worker_resumes_from_its_changelog(settings, worker, tmp_path):
    """Kill the worker mid-incident; its successor restores node state and resolves, never re-opens."""
    hot = {3: (88.0, 1100.0)}
    async with SnapshotPublisher(settings) as pub:
        for i in range(10):
            await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=hot)])
    records = await consume(settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=60, alive=worker.alive)
    assert [e.event for e in _incidents(records)] == ["opened"]
    await asyncio.sleep(2 * settings.streams.commit_interval_s)  # let the offsets and changelog land
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(10)

    successor = WorkerProcess(settings, tmp_path / "worker2.log")
    successor.start()
    try:
        async with SnapshotPublisher(settings) as pub:
            for i in range(10, 20):
                await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2")])
        records = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 2, timeout=90, alive=successor.alive
        )
        await asyncio.sleep(1.0)
        records = await consume(settings, settings.incidents_topic, lambda rs: False, timeout=1.5)
        events = _incidents(records)
        assert [e.event for e in events] == ["opened", "resolved"], successor.log_tail()
        assert events[0].incident_id == events[1].incident_id
    finally:
        successor.stop()
