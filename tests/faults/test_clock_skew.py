"""Fault drill: clock skew (item 1 of the hardening issue), against a real worker on the bundled broker.

Before: one dcgm snapshot dated 10 years ahead made the worker drop that source's next 42 real snapshots as
"redeliveries" (the thermal fault they carried never opened an incident), and a snapshot 10 years ahead from
another source of a node force-resolved its open incident with ``resolved_at`` 10 years ahead, after which the
same fault paged again. Now event time is bounded against arrival (``streams.max_future_skew_s``): the future
snapshots go to the dead-letter topic with the reason, and the real ones all count.

Figures: real snapshots dropped (must be 0), future snapshots dead-lettered, incidents resolved in the future
(must be 0).
"""

from __future__ import annotations

import re
import time

import pytest

from tailhound.deadletter import DeadLetter
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.snapshot import GaugeSample, Snapshot
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.faults.conftest import scale
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]

TEN_YEARS = 10 * 365 * 86_400.0
HOT = {3: (88.0, 1100.0)}
TICKS = 42
#: the stats line the worker logs (streams.stats_interval_s)
INTAKE = re.compile(r"intake: (\d+) accepted, (\d+) redelivered")


def intake(log_text: str) -> tuple[int, int] | None:
    found = INTAKE.findall(log_text)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


async def test_future_snapshots_are_dead_lettered_and_no_real_snapshot_is_dropped(settings, tmp_path, drill_report):
    settings = settings.model_copy(update={"streams": settings.streams.model_copy(update={"stats_interval_s": 0.5})})
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    pairs = scale(1, 8)  # node pairs under attack: one poisoned on its own source, one from another source
    t_start = time.monotonic()
    try:
        base = time.time() - 2 * 3600  # real event time: two hours ago, 15 s apart
        producer = make_producer(settings)
        await producer.start()
        real = future = 0

        async def send(snap: Snapshot) -> None:
            value = snap.model_dump_json().encode()
            await producer.send_and_wait(settings.telemetry_topic, key=snap.key(), value=value)

        try:
            for i in range(TICKS):
                ts = base + 15 * i
                for p in range(pairs):
                    same, other = f"skew-a{p}", f"skew-b{p}"
                    if i == 0:  # the same source (dcgm), 10 years ahead, before any real snapshot of it
                        await send(dcgm_snapshot(time.time() + TEN_YEARS, node=same))
                        future += 1
                    if i == 12:  # another source of the node, 10 years ahead, while its incident is open
                        await send(
                            Snapshot(
                                ts=time.time() + TEN_YEARS,
                                node=other,
                                source="node",
                                interval_s=15,
                                samples=[GaugeSample(name="node_load1", value=1.0)],
                            )
                        )
                        future += 1
                    for node in (same, other):
                        await send(dcgm_snapshot(ts, node=node, hot=HOT if 4 <= i < 20 else None))
                        real += 1
        finally:
            await producer.stop()

        nodes = {f"skew-{side}{p}" for p in range(pairs) for side in "ab"}

        def done(rs) -> bool:
            evs = [IncidentEvent.model_validate_json(r.value) for r in rs]
            return nodes <= _nodes_in(evs) and _open_ids(evs) == set()

        records = await consume(settings, settings.incidents_topic, done, timeout=90, alive=worker.alive)
        letters = await consume(
            settings, settings.deadletter_topic, lambda rs: len(rs) >= future, timeout=30, alive=worker.alive
        )
        deadline = time.monotonic() + 15
        counts = intake(worker.log_path.read_text(errors="replace"))
        while (counts is None or counts[0] + counts[1] < real) and time.monotonic() < deadline and worker.alive():
            time.sleep(0.5)
            counts = intake(worker.log_path.read_text(errors="replace"))
        now = time.time()
    finally:
        worker.stop()

    events = [IncidentEvent.model_validate_json(r.value) for r in records]
    letters = [DeadLetter.model_validate_json(r.value) for r in letters]
    lifecycles: dict[str, list[str]] = {}
    for e in events:  # (the roll-up folds one cause on several nodes into one incident)
        lifecycles.setdefault(e.incident_id, []).append(e.event)
    in_future = [e for e in events if (e.resolved_at or 0) > now + 300 or e.ts > now + 300]
    accepted, dropped = counts if counts is not None else (0, real)
    drill_report(
        pairs=pairs,
        nodes=len(nodes),
        real_snapshots=real,
        future_snapshots=future,
        real_dropped=dropped,
        real_accepted=accepted,
        dead_lettered=len(letters),
        dead_letter_kinds=sorted({d.kind or "" for d in letters}),
        incidents=len(lifecycles),
        incident_events=len(events),
        resolved_in_future=len(in_future),
        wall_s=round(time.monotonic() - t_start, 1),
    )
    assert counts is not None, worker.log_tail()
    assert dropped == 0 and accepted == real
    assert in_future == []
    assert len(letters) == future and {d.kind for d in letters} == {"future_ts"}
    assert all(d.stage == "time" and "ahead of its arrival" in d.reason for d in letters)
    assert _nodes_in(events) == nodes  # every node's fault diagnosed (before: the poisoned ones never)
    for lifecycle in lifecycles.values():  # opened once, resolved once (before: resolved 10 years ahead, re-paged)
        assert lifecycle[0] == "opened" and lifecycle[-1] == "resolved" and lifecycle.count("resolved") == 1
        assert lifecycle.count("opened") == 1, lifecycles


def _nodes_in(events: list[IncidentEvent]) -> set[str]:
    return {n for e in events for n in ([e.scope.node] if e.scope.node else []) + list(e.scope.nodes)}


def _open_ids(events: list[IncidentEvent]) -> set[str]:
    opened = {e.incident_id for e in events if e.event == "opened"}
    return opened - {e.incident_id for e in events if e.event == "resolved"}
