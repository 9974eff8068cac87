"""A node's persisted evaluation state (pure models): what every rule holds for its entities, the short
histories and rolling baselines rules compare with, the latency windows, the open incidents. The worker
keeps one per node in the changelogged ``node-state`` table; the stages of :mod:`tailhound.streams.stages`
read and write it, :func:`tailhound.streams.evaluator.evaluate` runs them."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from tailhound.catalog import Catalog
from tailhound.incident import Evidence
from tailhound.snapshot import Snapshot

from .baseline import RollingBaseline
from .episode import Episode
from .evidence_traces import SeriesTrace
from .latency import LatencyTracker
from .latest_values import LatestValues
from .series_history import SeriesHistory


class FiringEntity(BaseModel):
    since: float
    last_true: float
    #: when it started firing (None: not recorded, read as `since` + the rule's `for`)
    fired_at: float | None = None
    evidence: list[Evidence] = Field(default_factory=list)


class RuleState(BaseModel):
    pending: dict[str, float] = Field(default_factory=dict)
    firing: dict[str, FiringEntity] = Field(default_factory=dict)

    def is_idle(self) -> bool:
        return not (self.pending or self.firing)


class NodeState(BaseModel):
    """A node's persisted evaluation state (what the table stores per node)."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
    node: str
    #: bumped on every write to the table (tailhound.streams.processor reuses its decoded copy while they match)
    version: int = 0
    #: event time of the last write
    persisted_at: float = 0.0
    last_ts: dict[str, float] = Field(default_factory=dict, description="newest ts seen per source and instance")
    #: the telemetry partition the node's snapshots arrive on (set by the worker: a silent node is expired
    #: while a message of that partition is processed, see tailhound.streams.intake.NodeExpiry)
    partition: int | None = None
    rules: dict[str, RuleState] = Field(default_factory=dict)
    #: "signal|entity" -> [[ts, value], ...]: short histories for `growing_for` conditions
    history: dict[str, SeriesHistory] = Field(default_factory=dict)
    #: "scope:comparison|entity" -> [last verdict, last judged, change times...]: transition counters
    #: (`crossed:` conditions, streams/ruleset/crossings.py)
    crossings: dict[str, list[float]] = Field(default_factory=dict)
    #: "signal|entity" -> RollingBaseline state, for signals rules compare with their baseline
    baselines: dict[str, dict] = Field(default_factory=dict)
    #: LatencyTracker state: windows of histogram deltas per (signal, engine) of this node
    latency: dict | None = None

    #: open incidents by domain (see tailhound.streams.correlate) and lone symptoms waiting for a cause
    incidents: dict[str, Episode] = Field(default_factory=dict)
    orphans: dict[str, float] = Field(default_factory=dict)
    #: names of the LLMs served on this node (from engine samples), for the incident scope, and engine -> model;
    #: stored under ``models`` (the record's key since the first version)
    model_names: list[str] = Field(default_factory=list, alias="models")
    engine_models: dict[str, str] = Field(default_factory=dict)
    #: "rule|signal" -> the recent history of the evidence of pending and firing rules (incident charts)
    traces: dict[str, SeriesTrace] = Field(default_factory=dict)
    _latest: LatestValues | None = PrivateAttr(default=None)
    # decoded forms of `latency` and `baselines`, written back by sync() before the state is stored
    _tracker: LatencyTracker | None = PrivateAttr(default=None)
    _baseline_objs: dict[str, RollingBaseline] = PrivateAttr(default_factory=dict)
    _dirty: set[str] = PrivateAttr(default_factory=set)
    # True after shed(): every decoded baseline's stored form was dropped (the objects are the truth), and sync()
    # writes them all again, so _dirty does not list baselines meanwhile (40 keys were ~5 KB a node)
    _shed: bool = PrivateAttr(default=False)

    def tracker(self, catalog: Catalog) -> LatencyTracker:
        if self._tracker is None:
            self._tracker = (
                LatencyTracker.from_dict(self.latency, catalog) if self.latency else LatencyTracker(catalog=catalog)
            )
        return self._tracker

    def baseline_of(self, key: str) -> RollingBaseline | None:
        objs = self.__pydantic_private__["_baseline_objs"]  # type: ignore[index]  # (getattr of a private is slow)
        obj = objs.get(key)
        if obj is None and key in self.baselines:
            obj = objs[key] = RollingBaseline.from_dict(self.baselines[key])
        return obj

    def sync(self) -> None:
        """Write the decoded windows and baselines back into the stored fields (before a dump)."""
        private = self.__pydantic_private__  # type: ignore[union-attr]  # (getattr of a private is slow)
        dirty, objs, tracker = private["_dirty"], private["_baseline_objs"], private["_tracker"]
        if tracker is not None and "latency" in dirty:
            self.latency = tracker.to_dict()
        baselines = self.baselines
        for key in objs if private["_shed"] else dirty - {"latency"}:  # (new keys in this order in the stored dict)
            baselines[key] = objs[key].to_dict()
        dirty.clear()
        private["_shed"] = False

    def shed(self) -> None:
        """Drop the stored forms of what is decoded (after a dump: the objects hold the same, and sync() writes
        them again), so that memory holds each window and baseline once. Keys stay, in their order."""
        private = self.__pydantic_private__  # type: ignore[union-attr]
        baselines = self.baselines
        for key in private["_baseline_objs"]:
            baselines[key] = None  # type: ignore[assignment]  # (until sync(): only the object is read)
        private["_shed"] = True
        if private["_tracker"] is not None and self.latency is not None:
            self.latency = None
            private["_dirty"].add("latency")


def heal_future(state: NodeState, horizon: float, now: float | None = None) -> bool:
    """Forget what a state holds from after `horizon` (the latest event time acceptable now): a state stored
    before event time was bounded may carry a snapshot's time from years ahead, which would make every real
    snapshot of that source look like a redelivery, keep entities firing or pending forever and mute
    residual causes. Such source times are forgotten; entity and symptom times are brought back to the
    newest sane time of the node, else `now` (a firing entity keeps firing and stops by the usual rules, in
    real time; with neither it is dropped, and its incident resolves on the next snapshot). True when
    something was changed."""
    healed = False
    for key in [k for k, t in state.last_ts.items() if t > horizon]:
        del state.last_ts[key]
        healed = True
    sane = max(state.last_ts.values(), default=now)
    if state.persisted_at > horizon:
        state.persisted_at, healed = 0.0, True
    for key in [k for k, t in state.orphans.items() if t > horizon]:
        if sane is None or key.startswith("resolved@"):
            del state.orphans[key]
        else:
            state.orphans[key] = sane
        healed = True
    for name in list(state.rules):
        rs = state.rules[name]
        for e in [e for e, since in rs.pending.items() if since > horizon]:
            if sane is None:
                del rs.pending[e]
            else:
                rs.pending[e] = sane
            healed = True
        for e in [e for e, f in rs.firing.items() if f.since > horizon or f.last_true > horizon]:
            f = rs.firing[e]
            if sane is None:
                del rs.firing[e]
                rs.pending.pop(e, None)
            else:
                f.since, f.last_true = min(f.since, sane), min(f.last_true, sane)
            healed = True
        if rs.is_idle():
            del state.rules[name]
    for key in list(state.history):
        pts = state.history[key]
        kept = pts.until(horizon)
        if len(kept) != len(pts):
            healed = True
            if kept:
                state.history[key] = kept
            else:
                del state.history[key]
    for key in [k for k, entry in state.crossings.items() if max(entry[1:], default=math.inf) > horizon]:
        del state.crossings[key]  # a counter judged in the future (or malformed): counting starts again
        healed = True
    for key in [k for k, t in state.traces.items() if t.ts and t.ts[-1] > horizon]:
        del state.traces[key]  # a chart that ran into the future: started again by the next points
        healed = True
    return healed


def source_key(snapshot: Snapshot) -> str:
    """Redelivery is detected per source *and* instance: two vLLM servers on one node scrape apart."""
    inst = snapshot.labels.get("instance") or snapshot.labels.get("target") or snapshot.labels.get("endpoint")
    return f"{snapshot.source}|{inst}" if inst else snapshot.source
