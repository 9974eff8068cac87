"""Offline replay: a scrape recording -> incident events, with no broker, in event time.

``tailhound replay`` turns each recorded line into a snapshot with the agent's own pipeline and runs it through
what the worker runs (:class:`tailhound.streams.processor.SnapshotProcessor`, the model stage, the roll-up), with
state in memory; the same recording and rules always give the same bytes. Intake is the worker's, except that a
line's event time is bounded against the recording's own progression (:class:`tailhound.streams.intake.Progression`),
as a recording has no arrival time; skipped lines are counted in ``ReplayResult.rejected``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.incident import IncidentEvent
from tailhound.recording import ScrapeRecord, read_records
from tailhound.snapshot import Snapshot

from .intake import NodeExpiry, Progression, TimeBounds, entities
from .loadmodel import LoadModel
from .model_stage import ModelStage, split_rules
from .processor import MemoryStateStore, SnapshotProcessor
from .rollup.incidents import RollupState, rollup
from .rollup.order import MODEL_STAGE, NODE_STAGE, EventOrder, OrderState
from .rollup.watermarks import PartitionClock
from .ruleset.rulefile import RuleSet


@dataclass
class ReplayResult:
    records: int = 0
    snapshots: int = 0
    events: list[IncidentEvent] = field(default_factory=list)
    seconds: float = 0.0
    #: snapshots skipped, by reason (``future_ts``: ahead of the recording's progression)
    rejected: Counter[str] = field(default_factory=Counter)
    #: snapshots not newer than their source's last one on the node (ignored, as the worker does)
    redelivered: int = 0
    #: nodes expired after node_expiry_s without telemetry
    nodes_expired: int = 0


def replay_records(
    records: Iterable[ScrapeRecord],
    rules: RuleSet,
    out: IO[str] | None = None,
    load_models: dict[str, LoadModel] | None = None,
    sla: dict[str, dict[str, float]] | None = None,
    max_future_skew_s: float = 300.0,
    node_expiry_s: float = 3600.0,
) -> ReplayResult:
    """`max_future_skew_s` and `node_expiry_s` as settings.streams has them (0: no expiry)."""
    builder = SnapshotBuilder()
    result = ReplayResult()

    def snapshots() -> Iterator[Snapshot]:
        for rec in records:
            result.records += 1
            yield builder.build(rec)

    return replay_snapshots(snapshots(), rules, out, load_models, sla, max_future_skew_s, node_expiry_s, result=result)


def replay_snapshots(
    snapshots: Iterable[Snapshot],
    rules: RuleSet,
    out: IO[str] | None = None,
    load_models: dict[str, LoadModel] | None = None,
    sla: dict[str, dict[str, float]] | None = None,
    max_future_skew_s: float = 300.0,
    node_expiry_s: float = 3600.0,
    result: ReplayResult | None = None,
) -> ReplayResult:
    """The events of `snapshots` (in the order given, as the worker would take them from one partition):
    what :func:`replay_records` does after building the snapshots (the remote-write ingest's are replayed
    so, to compare them with the agent's)."""
    node_rules, model_rules = split_rules(rules)
    processor = SnapshotProcessor(node_rules, load_models=load_models, sla=sla)
    model_stage = ModelStage(model_rules, load_models=load_models, sla=sla)
    store = MemoryStateStore()
    rolled = RollupState()
    result = result if result is not None else ReplayResult()
    expiry = NodeExpiry(node_expiry_s or None)
    t0 = time.perf_counter()

    # the roll-up takes the events in event-time order, as the worker's does (tailhound.streams.rollup.order):
    # held back until the stages' watermarks pass them, here without a wall-clock bound
    order, ordered = EventOrder(math.inf, idle_wall_s=0.0, cold_s=0.0), OrderState()
    clock = PartitionClock()

    def roll(members: Iterable[IncidentEvent]) -> None:
        for member in members:
            for ev in rollup(rolled, member):
                result.events.append(ev)
                if out is not None:
                    out.write(ev.model_dump_json() + "\n")

    def emit(members: Iterable[IncidentEvent]) -> None:
        for member in members:
            roll(order.member(ordered, member, 0.0))

    def progress(source: str, mark: float | None) -> None:
        if mark is not None:
            roll(order.progress(ordered, source, mark, 0.0))

    progression = Progression(TimeBounds(max_future_skew_s))
    for snap, rejected in progression.judge(snapshots, lambda s: s.ts):
        result.snapshots += 1
        rejected = rejected or entities(snap)  # (what the worker's gate rejects at admission)
        if rejected is not None:
            result.rejected[rejected.kind] += 1
            continue
        step = processor.step(store.get(snap.node), snap)
        result.redelivered += step.redelivered
        if step.changed:
            store[snap.node] = step.state
        model_events = model_stage.feed(snap, processor.open_causes(snap.node)) if model_stage.enabled else []
        emit([*step.events, *model_events])
        if not step.redelivered:
            progress(f"{NODE_STAGE}/0", clock.observe(0, snap.node, snap.source, snap.ts))
        if model_events or model_stage.enabled:
            progress(f"{MODEL_STAGE}/0", model_stage.watermark(list(model_stage.aggregators)))
        if expiry.tick(0, snap.ts):
            for node, _seen in expiry.gone(0, store.items(), lambda _node: 0):
                gone = processor.expire(node, store.get(node), snap.ts, node_expiry_s)
                if gone is not None:
                    emit(gone)
                    del store[node]
                    result.nodes_expired += 1
    roll(order.drain(ordered))
    result.seconds = time.perf_counter() - t0
    return result


def replay_files(
    paths: list[Path],
    rules: RuleSet,
    out_path: Path | None,
    load_models: dict[str, LoadModel] | None = None,
    sla: dict[str, dict[str, float]] | None = None,
) -> ReplayResult:
    """Replay recordings one after another (each file in its own order) into `out_path`."""

    def records() -> Iterable[ScrapeRecord]:
        for p in paths:
            yield from read_records(p)

    if out_path is None:
        return replay_records(records(), rules, load_models=load_models, sla=sla)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w", encoding="utf-8") as out:
        return replay_records(records(), rules, out, load_models=load_models, sla=sla)
