"""A worker with ``streams.store: rocksdb`` on the real broker: it processes telemetry into its local
RocksDB tables, and a restarted worker resumes the node's open incident from them."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from tailhound.agents.publisher import SnapshotPublisher
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics
from tailhound.streams.codec import inflate_state
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
rocksdict = pytest.importorskip("rocksdict", reason="the rocksdb extra: pip install 'tailhound[rocksdb]'")
T0 = 1_767_225_600.0


def _incidents(records) -> list[IncidentEvent]:
    return [IncidentEvent.model_validate_json(r.value) for r in records]


def _stored_node(tables, node: str) -> dict | None:
    """The node's state as the stopped worker left it in its local node-state databases."""
    options = rocksdict.Options(raw_mode=True)
    for path in sorted(tables.glob("node-state-*.db")):
        db = rocksdict.Rdict(str(path), options=options, access_type=rocksdict.AccessType.read_only())
        try:
            raw = db.get(json.dumps(node).encode())
        finally:
            db.close()
        if raw is not None:
            return json.loads(inflate_state(raw))
    return None


async def test_rocksdb_worker_resumes_the_incident_from_its_local_store(settings, tmp_path):
    # a short session: the successor does not wait 10 s for the killed worker to leave the group
    streams = settings.streams.model_copy(
        update={"store": "rocksdb", "session_timeout_s": 3.0, "heartbeat_interval_s": 0.5}
    )
    settings = settings.model_copy(update={"streams": streams})
    await ensure_topics(settings)
    first = WorkerProcess(settings, tmp_path / "worker.log")
    first.start()
    try:
        async with SnapshotPublisher(settings) as pub:
            for i in range(10):
                await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot={3: (88.0, 1100.0)})])
        records = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=60, alive=first.alive
        )
        assert [e.event for e in _incidents(records)] == ["opened"], first.log_tail()
        await asyncio.sleep(2 * settings.streams.commit_interval_s)  # let the offsets and changelog land
    finally:
        if first.proc is not None:
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(10)
            first.proc = None

    tables = settings.streams.data_dir / "v1" / "tables"
    stored = _stored_node(tables, "gpu-node-2")
    assert stored is not None, sorted(p.name for p in tables.iterdir())
    assert stored["incidents"], "the open incident is in the local store"

    successor = WorkerProcess(settings, tmp_path / "worker2.log")
    successor.start()
    try:
        async with SnapshotPublisher(settings) as pub:
            for i in range(10, 20):
                await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2")])
        records = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 2, timeout=60, alive=successor.alive
        )
        events = _incidents(records)
        assert [e.event for e in events] == ["opened", "resolved"], successor.log_tail()
        assert events[0].incident_id == events[1].incident_id
    finally:
        successor.stop()
