"""Version-3 telemetry end to end: publisher -> real broker -> Faust worker (child process) -> the same
incident as from version 1, with layouts referenced; a hostile version-3 message is a dead letter and the worker
goes on."""

from __future__ import annotations

import asyncio
import signal

import msgspec
import pytest

from tailhound.agents.publisher import SnapshotPublisher
from tailhound.deadletter import DeadLetter
from tailhound.kafka import ensure_topics, make_producer
from tailhound.wire import encode_message
from tailhound.wire.v3 import Message, to_part
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.kafka_helpers import consume, until_resolved

pytestmark = [pytest.mark.broker, pytest.mark.slow]
T0 = 1_767_225_600.0


async def test_a_version_3_fleet_opens_and_resolves_the_incident_and_a_bad_message_is_a_dead_letter(settings, tmp_path):
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    try:
        producer = make_producer(settings)
        await producer.start()
        try:
            part = msgspec.structs.replace(to_part(dcgm_snapshot(T0, node="gpu-node-9")), names=[10_000])
            hostile = msgspec.msgpack.encode(Message(3, "gpu-node-9", [part]))
            await producer.send_and_wait(settings.telemetry_topic, key=b"gpu-node-9", value=hostile)
            await producer.send_and_wait(
                settings.telemetry_topic, key=b"other-node", value=encode_message(dcgm_snapshot(T0, node="gpu-node-9"))
            )
        finally:
            await producer.stop()
        hot = {3: (88.0, 1100.0), 5: (87.0, 1150.0)}
        # layouts referenced: each node's first snapshot carries its tables, the others only values
        async with SnapshotPublisher(settings, wire=3, layout_every_s=300) as pub:
            for i in range(30):
                await pub.publish(
                    [
                        dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=hot if 4 <= i < 20 else None),
                        dcgm_snapshot(T0 + 15 * i, node="gpu-node-1"),
                    ]
                )
        events = await until_resolved(settings, alive=worker.alive)
        assert worker.alive(), worker.log_tail()
        assert [e.event for e in events] == ["opened", "resolved"], worker.log_tail()
        assert events[0].root_cause == "gpu-thermal-throttle" and events[0].scope.gpus == ["3", "5"]
        letters = await consume(
            settings, settings.deadletter_topic, lambda rs: len(rs) >= 2, timeout=30, alive=worker.alive
        )
        kinds = [(d.kind, d.stage) for d in map(DeadLetter.model_validate_json, (r.value for r in letters))]
        assert kinds == [("invalid", "validate"), ("wrong_key", "key")]
        assert DeadLetter.model_validate_json(letters[0].value).original_bytes() == hostile
    finally:
        worker.stop()


async def test_a_restarted_worker_reads_values_only_parts_with_the_layouts_its_predecessor_stored(settings, tmp_path):
    """Layouts referenced and never refreshed here: after a kill, the successor reads the node's values-only
    parts with the layout from the layouts table's changelog (no `unknown_layout` gap) and pages as before."""
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    hot = {3: (88.0, 1100.0), 5: (87.0, 1150.0)}
    try:
        async with SnapshotPublisher(settings, wire=3, layout_every_s=3600) as pub:
            for i in range(6):
                await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2")])
            stored = await consume(
                settings, f"{settings.streams.app_id}-layouts-changelog", lambda rs: len(rs) >= 1, 60, worker.alive
            )
            assert len(stored) == 1, worker.log_tail()
            await asyncio.sleep(2 * settings.streams.commit_interval_s)  # let the offsets land
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait(10)
            worker = WorkerProcess(settings, tmp_path / "worker2.log")
            worker.start()
            for i in range(6, 36):  # (every part a reference: the layout went with the first snapshot)
                await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=hot if 8 <= i < 24 else None)])
        events = await until_resolved(settings, alive=worker.alive)
        assert [e.event for e in events] == ["opened", "resolved"], worker.log_tail()
        assert events[0].root_cause == "gpu-thermal-throttle" and events[0].scope.gpus == ["3", "5"]
        letters = await consume(settings, settings.deadletter_topic, lambda rs: False, timeout=1.5)
        assert not letters, [DeadLetter.model_validate_json(r.value).reason for r in letters]
    finally:
        worker.stop()
