"""Each engine of a model against the other engines serving it (the model stage's peer view, pure).

A node that got slower at the same load is a node-local fault; the other engines of the same model say so at
once, where the node's own baseline needs 20 minutes and moves with the daily curve. :class:`EnginePeerWindows`
keeps, per engine, its TPOT and end-to-end histogram deltas over :data:`PEER_WINDOW_S` and adds per-engine
gauges to each closed bucket (``model.engine_tpot_mean``, ``model.engine_request_rate``,
``model.engine_node_explained``: docs/signals.md), which rules read with ``{peers: k}``. Memory only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tailhound.catalog import Catalog
from tailhound.snapshot import GaugeSample, Snapshot

PEER_WINDOW_S = 180.0
#: fewer finished requests than this over the window: no TPOT mean for the engine (too few to compare)
MIN_REQUESTS = 20
TPOT_MEAN = "tailhound_engine_tpot_mean_seconds"
REQUEST_RATE = "tailhound_engine_request_rate"
NODE_EXPLAINED = "tailhound_engine_node_explained"
#: root causes on an engine's node that do not set it apart from its peers (the same finding, or the model's)
NOT_EXPLAINING = frozenset({"capacity", "node-degraded"})
_PEER_HISTOGRAMS = ("latency.tpot", "latency.e2e")
#: the stage's per-engine signals computed from an engine's histograms, and from which (coverage, engines)
COMPUTED_FROM: dict[str, tuple[str, ...]] = {
    "model.engine_tpot_mean": ("latency.tpot",),
    "model.engine_request_rate": ("latency.e2e",),
}
#: the stage's per-engine signal computed from worker state (its node's open incidents)
NODE_EXPLAINED_SIGNAL = "model.engine_node_explained"


def peer_histograms(catalog: Catalog) -> dict[str, dict[str, tuple[str, ...]]]:
    """source -> {"latency.tpot": metric names in preference order, "latency.e2e": ...}."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for signal in _PEER_HISTOGRAMS:
        spec = catalog.spec(signal)
        if spec is None:
            continue
        for source, metrics in spec.sources.items():
            out.setdefault(source, {})[signal] = tuple(m.metric for m in metrics)
    return out


@dataclass
class _Window:
    """One engine's (event time, interval, tpot sum, tpot count, finished requests) per snapshot, oldest
    first."""

    source: str
    items: deque = field(default_factory=deque)
    tpot_sum: float = 0.0
    tpot_count: float = 0.0
    finished: float = 0.0

    def add(self, ts: float, interval_s: float, tpot_sum: float, tpot_count: float, finished: float) -> None:
        self.items.append((ts, interval_s, tpot_sum, tpot_count, finished))
        self.tpot_sum += tpot_sum
        self.tpot_count += tpot_count
        self.finished += finished

    def trim(self, now: float, window_s: float) -> None:
        while self.items and self.items[0][0] <= now - window_s:
            _, _, s, c, f = self.items.popleft()
            self.tpot_sum -= s
            self.tpot_count -= c
            self.finished -= f

    def span(self, now: float, window_s: float) -> float:
        """Seconds the window's deltas cover (the first snapshot's deltas start one interval before it)."""
        return min(window_s, now - self.items[0][0] + self.items[0][1]) if self.items else 0.0


@dataclass
class EnginePeerWindows:
    """Per engine of one model: its TPOT and finished requests over the last `window_s`."""

    histograms: dict[str, dict[str, tuple[str, ...]]]
    window_s: float = PEER_WINDOW_S
    engines: dict[str, _Window] = field(default_factory=dict)

    def add(self, snapshot: Snapshot, model: str) -> None:
        names = self.histograms.get(snapshot.source)
        if not names:
            return
        common = snapshot.labels.get("model_name")
        engine = f"{snapshot.node}/{snapshot.labels.get('engine') or snapshot.labels.get('instance') or ''}"
        found: dict[str, tuple[float, float]] = {}
        for s in snapshot.samples:
            if (
                s.kind != "histogram"
                or s.delta is None  # (by kind: version-3 samples are structs)
                or (s.labels.get("model_name") or common) != model
            ):
                continue
            for signal, metrics in names.items():
                if s.name in metrics:
                    rank = metrics.index(s.name)
                    have = found.get(signal)
                    if have is None or rank < have[2]:
                        found[signal] = (s.delta.sum, s.delta.count, rank)
                    elif rank == have[2]:
                        found[signal] = (have[0] + s.delta.sum, have[1] + s.delta.count, rank)
        if not found:
            return
        tpot = found.get("latency.tpot", (0.0, 0.0, 0))
        e2e = found.get("latency.e2e", (0.0, 0.0, 0))
        win = self.engines.get(engine)
        if win is None or win.source != snapshot.source:
            win = self.engines[engine] = _Window(snapshot.source)
        win.add(snapshot.ts, snapshot.interval_s or 0.0, max(tpot[0], 0.0), max(tpot[1], 0.0), max(e2e[1], 0.0))

    def gauges(self, now: float, source: str, explained: frozenset[str] = frozenset()) -> list[GaugeSample]:
        """The gauges of `source`'s engines as of `now` (engines silent for a whole window are forgotten);
        `explained`: the nodes with an open root cause that explains a slower engine."""
        out: list[GaugeSample] = []
        for engine in sorted(self.engines):
            win = self.engines[engine]
            if win.source != source:
                continue
            win.trim(now, self.window_s)
            if not win.items:
                del self.engines[engine]
                continue
            span = win.span(now, self.window_s)
            labels = {"engine": engine}
            flag = 1.0 if engine.split("/", 1)[0] in explained else 0.0
            out.append(GaugeSample.trusted(name=NODE_EXPLAINED, labels=labels, value=flag))
            if span > 0:
                out.append(GaugeSample.trusted(name=REQUEST_RATE, labels=labels, value=win.finished / span))
            if win.finished >= MIN_REQUESTS and win.tpot_count > 0:
                out.append(GaugeSample.trusted(name=TPOT_MEAN, labels=labels, value=win.tpot_sum / win.tpot_count))
        return out
