"""Made-up node names against a real worker with a small ``streams.max_nodes``: the table stays at the cap, the
evicted names are tombstoned in the changelog (a restart does not bring them back), evictions are logged and
counted, and the real nodes that keep sending are diagnosed as ever."""

from __future__ import annotations

import json
import time

import pytest

from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.streams.app import STATE_TABLE
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.faults.conftest import scale
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
CAP, FAKES = 6, scale(60, 3000)
HOT = {3: (88.0, 1100.0)}


async def test_a_flood_of_node_names_is_evicted_and_tombstoned_and_the_real_nodes_stay(settings, tmp_path):
    settings = settings.model_copy(
        update={"partitions": 1, "streams": settings.streams.model_copy(update={"max_nodes": CAP})}
    )
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log", max_restarts=0)
    worker.start()
    base = time.time() - 3600
    try:
        producer = make_producer(settings)
        await producer.start()
        try:

            async def send(snap) -> None:
                await producer.send_and_wait(
                    settings.telemetry_topic, key=snap.key(), value=snap.model_dump_json().encode()
                )

            for i in range(16):
                ts = base + 15 * i
                await send(dcgm_snapshot(ts, node="real-sick", hot=HOT if i >= 2 else None, gpus=4))
                await send(dcgm_snapshot(ts, node="real-ok", gpus=1))
                if i >= 2:  # once the real nodes sent twice: one-shot names between their snapshots
                    for n in range((i - 2) * FAKES // 14, (i - 1) * FAKES // 14):
                        await send(dcgm_snapshot(ts + 1, node=f"made-up-{n}", gpus=1))
        finally:
            await producer.stop()
        records = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=60, alive=worker.alive
        )
        changelog = f"{settings.streams.app_id}-{STATE_TABLE}-changelog"
        entries = await consume(
            settings,
            changelog,
            lambda rs: sum(r.value is None for r in rs) >= FAKES - CAP,
            timeout=30,
            alive=worker.alive,
        )
        assert worker.alive() and worker.restarts == 0, worker.log_tail()
        log = worker.log_path.read_text(errors="replace")
    finally:
        worker.stop()

    events = [IncidentEvent.model_validate_json(r.value) for r in records]
    assert [(e.event, e.root_cause, e.scope.node) for e in events[:1]] == [
        ("opened", "gpu-thermal-throttle", "real-sick")
    ], log[-3000:]
    latest: dict[str, bytes | None] = {}
    for r in entries:
        latest[json.loads(r.key)] = r.value
    held = [k for k, v in latest.items() if v is not None]
    assert latest["real-sick"] is not None and latest["real-ok"] is not None
    assert len(held) <= CAP, held
    assert sum(1 for k, v in latest.items() if k.startswith("made-up-") and v is None) >= FAKES - CAP
    assert 1 <= log.count("fleet state over its cap") <= 2  # once a minute, not once per eviction
