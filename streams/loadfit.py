"""Training data for the load-aware baseline, from scrape recordings (``tailhound baseline fit``).

Recordings run through the same agent pipeline and streams step as replay (no rules), and every
`window_s` of event time each engine contributes one row: its load (mean prompt and generated tokens per
request, running and waiting requests, finished requests per second) and the latency percentile it had
(``latency.ttft.p95`` by default) over the tracker's window. Rows need `min_requests` observations.
"""

from __future__ import annotations

from collections.abc import Iterable

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.recording import ScrapeRecord

from .loadmodel import WindowFeatures, features_of
from .processor import MemoryStateStore, SnapshotProcessor
from .ruleset.rulefile import RuleSet

ENGINE_SOURCES = ("vllm", "tgi", "nim", "sglang")


def training_rows(
    records: Iterable[ScrapeRecord], signal: str = "latency.ttft.p95", window_s: float = 60.0, min_requests: int = 20
) -> tuple[list[WindowFeatures], list[float]]:
    builder = SnapshotBuilder()
    processor = SnapshotProcessor(RuleSet(rules=[]), all_stats=True)  # it reads the whole view
    store = MemoryStateStore()
    base = signal.rpartition(".")[0]
    last_row: dict[str, float] = {}
    rows: list[WindowFeatures] = []
    targets: list[float] = []
    for rec in records:
        snap = builder.build(rec)
        step = processor.step(store.get(snap.node), snap)
        if step.changed:
            store[snap.node] = step.state
        if snap.source not in ENGINE_SOURCES or snap.ts - last_row.get(snap.node, 0.0) < window_s:
            continue
        last_row[snap.node] = snap.ts
        view = processor.view(snap.node, snap.ts)
        for entity, target in (view.get(signal) or {}).items():
            if (view.get(f"{base}.window_count") or {}).get(entity, 0) < min_requests:
                continue
            feats = features_of(view, entity, snap.ts)
            if feats is not None:
                rows.append(feats)
                targets.append(target)
    return rows, targets
