"""Node expiry in a real worker on the bundled broker (item 3 of the hardening issue): a churning fleet left one
state (~6 KB) per node it ever saw in the worker's table, its changelog and memory, forever. Now a node
silent for ``streams.node_expiry_s`` of event time resolves its open incidents ("node gone") and its state is
deleted: a tombstone in the table's changelog, so a restarted worker does not restore it either."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.streams.app import STATE_TABLE
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]

EXPIRY_S = 300.0
CHURN = 120  # nodes that each send two snapshots and go away
#: churned nodes silent for more than EXPIRY_S (+ a check interval, 60 s) when the last snapshot is sent
MIN_EXPIRED = CHURN * (80 - int(EXPIRY_S / 15) - 4) // 80
EXPIRED = re.compile(r"(\d+) nodes expired \((\d+) incidents resolved\)")


async def test_silent_nodes_are_expired_their_incidents_resolved_and_their_state_deleted(settings, tmp_path):
    settings = settings.model_copy(
        update={
            "partitions": 1,
            "streams": settings.streams.model_copy(update={"node_expiry_s": EXPIRY_S, "stats_interval_s": 0.5}),
        }
    )
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    base = time.time() - 6 * 3600
    try:
        producer = make_producer(settings)
        await producer.start()
        try:

            async def send(snap) -> None:
                await producer.send_and_wait(
                    settings.telemetry_topic, key=snap.key(), value=snap.model_dump_json().encode()
                )

            for i in range(80):  # 20 minutes: gpu-node-2 opens an incident and goes silent at 5 min
                ts = base + 15 * i
                if i < 20:
                    await send(dcgm_snapshot(ts, node="gpu-node-2", hot={3: (88.0, 1100.0)}))
                await send(dcgm_snapshot(ts, node="gpu-node-1", gpus=1))
                for n in range(i * CHURN // 80, (i + 1) * CHURN // 80):  # a churning fleet
                    await send(dcgm_snapshot(ts, node=f"churn-{n}", gpus=1))
                    await send(dcgm_snapshot(ts + 5, node=f"churn-{n}", gpus=1))
        finally:
            await producer.stop()

        def resolved(rs) -> bool:
            return any(b'"resolved"' in r.value for r in rs)

        records = await consume(settings, settings.incidents_topic, resolved, timeout=60, alive=worker.alive)
        deadline = time.monotonic() + 30
        found = []
        while time.monotonic() < deadline and worker.alive():
            found = EXPIRED.findall(worker.log_path.read_text(errors="replace"))
            if found and int(found[-1][0]) >= MIN_EXPIRED:
                break
            await asyncio.sleep(0.5)
        changelog = f"{settings.streams.app_id}-{STATE_TABLE}-changelog"
        entries = await consume(settings, changelog, lambda rs: False, timeout=5)
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()

    events = [IncidentEvent.model_validate_json(r.value) for r in records]
    assert [e.event for e in events] == ["opened", "resolved"], worker.log_tail()
    gone = events[-1]
    assert gone.labels.get("resolution") == "node-gone" and "node gone" in gone.summary
    assert gone.scope.node == "gpu-node-2" and gone.resolved_at > base + 15 * 19 + EXPIRY_S
    latest: dict[str, bytes | None] = {}
    for r in entries:
        latest[json.loads(r.key)] = r.value
    assert latest["gpu-node-2"] is None  # tombstone: a restarted worker does not restore it
    assert latest["gpu-node-1"] is not None
    deleted = [k for k, v in latest.items() if k.startswith("churn-") and v is None]
    # nodes silent for more than 5 minutes of the 20 are gone (the last ones are still within their 5 minutes)
    assert MIN_EXPIRED <= len(deleted) < CHURN, len(deleted)
    assert int(found[-1][0]) == len(deleted) + 1 and int(found[-1][1]) == 1
