"""Offline replay: a scrape recording -> incident events, with no broker, in event time.

``tailhound replay RECORDING.jsonl [--rules rules/] --out incidents.jsonl`` reads the recording
(docs/recording-format.md), turns every line into a snapshot with the agent's own pipeline
(:class:`tailhound.agents.pipeline.SnapshotBuilder`), and runs each snapshot through
:class:`tailhound.streams.processor.SnapshotProcessor`, the step the Faust worker runs, keeping per-node state in
memory instead of a changelogged table; engine snapshots also feed the model stage
(:mod:`tailhound.streams.model_stage`, model- and fleet-scope rules), as the worker's second agent does, and
every incident event goes through the roll-up (:mod:`tailhound.streams.rollup`: one incident per fault
across nodes), as the worker's third agent does.
The output is one ``IncidentEvent`` JSON object per line, in
the order the events happened; the same recording and rules always give the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tailhound.agents.pipeline import SnapshotBuilder
from tailhound.incident import IncidentEvent
from tailhound.recording import ScrapeRecord, read_records

from .loadmodel import LoadModel
from .model_stage import ModelStage, split_rules
from .processor import MemoryStateStore, SnapshotProcessor
from .rollup import RollupState, rollup
from .ruleset import RuleSet


@dataclass
class ReplayResult:
    records: int = 0
    snapshots: int = 0
    events: list[IncidentEvent] = field(default_factory=list)
    seconds: float = 0.0


def replay_records(records: Iterable[ScrapeRecord], rules: RuleSet, out: IO[str] | None = None,
                   models: dict[str, LoadModel] | None = None, sla: dict[str, dict[str, float]] | None = None
                   ) -> ReplayResult:
    builder = SnapshotBuilder()
    node_rules, model_rules = split_rules(rules)
    processor = SnapshotProcessor(node_rules, models=models, sla=sla)
    model_stage = ModelStage(model_rules, models=models, sla=sla)
    store = MemoryStateStore()
    rolled = RollupState()
    result = ReplayResult()
    t0 = time.perf_counter()
    for rec in records:
        result.records += 1
        snap = builder.build(rec)
        result.snapshots += 1
        step = processor.step(store.get(snap.node), snap)
        if step.changed:
            store[snap.node] = step.state
        model_events = model_stage.feed(snap, processor.open_causes(snap.node)) if model_stage.enabled else []
        for member in [*step.events, *model_events]:
            for ev in rollup(rolled, member):
                result.events.append(ev)
                if out is not None:
                    out.write(ev.model_dump_json() + "\n")
    result.seconds = time.perf_counter() - t0
    return result


def replay_files(paths: list[Path], rules: RuleSet, out_path: Path | None,
                 models: dict[str, LoadModel] | None = None, sla: dict[str, dict[str, float]] | None = None
                 ) -> ReplayResult:
    """Replay recordings one after another (each file in its own order) into `out_path`."""

    def records() -> Iterable[ScrapeRecord]:
        for p in paths:
            yield from read_records(p)

    if out_path is None:
        return replay_records(records(), rules, models=models, sla=sla)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w", encoding="utf-8") as out:
        return replay_records(records(), rules, out, models=models, sla=sla)
