"""Rule evaluation as a pure state machine: ``evaluate(state, snapshot, rules) -> (state, events)``.

The Faust agent keeps one :class:`NodeState` per node in a changelogged table and calls this function
for every snapshot; replay and tests call it directly. Everything runs in event time (``snapshot.ts``).

Per rule and node:
- an entity (a GPU, an engine, the node) whose condition holds becomes *pending*; once it has held
  for the rule's ``for`` it is *firing*;
- it stops firing when the condition has been false for ``keep_firing_for``, or when it has not been
  seen for ``stale_after_s`` (its source went away);
- the firing entities of a rule on a node form one incident: it opens with the first entity, is
  *updated* when another entity joins (the scope only grows), and *resolves* when none is firing.

Rules read the node's merged view (:mod:`tailhound.streams.nodesignals`): the latest value of every signal from
every source of the node, counter rates, and derived ratios (computed per signal as rules read it);
conditions are judged by :mod:`tailhound.streams.condition_eval`'s semantics, compiled once per rule set by
:mod:`tailhound.streams.rule_plan`. A rule holding no state is stepped only when the snapshot changed a signal it
reads. Snapshots older than the newest already seen from the same source (and instance) on the node are
ignored, so a re-delivered message (at-least-once) changes nothing.
"""

from __future__ import annotations

import fnmatch

from pydantic import BaseModel, Field, PrivateAttr

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import Evidence, IncidentEvent
from tailhound.snapshot import Snapshot

from .baseline import RollingBaseline
from .condition_eval import EvalContext
from .condition_eval import _reduce as reduce_values
from .correlate import Episode, Firing, correlate
from .demand import ARRIVAL_RATE, FINISHED, INFLIGHT, arrival_rates
from .evidence import render_action, rule_evidence
from .latency import LatencyTracker
from .loadmodel import LoadModel, expected_for, features_of
from .nodesignals import CurrentValues, LatestValues, snapshot_values
from .rule_plan import RulePlan, entity_order, plans_for
from .ruleset import RuleSet, split_baseline_key
from .signals import DERIVED_SIGNALS, FLAG_SIGNALS, RATE_RATIOS, SLA_SIGNALS, SignalValues

__all__ = ["DEFAULT_STALE_AFTER_S", "FiringEntity", "NodeState", "RuleState", "evaluate", "render_action",
           "source_key"]

DEFAULT_STALE_AFTER_S = 300.0


class FiringEntity(BaseModel):
    since: float
    last_true: float
    evidence: list[Evidence] = Field(default_factory=list)


class RuleState(BaseModel):
    pending: dict[str, float] = Field(default_factory=dict)
    firing: dict[str, FiringEntity] = Field(default_factory=dict)

    def is_idle(self) -> bool:
        return not (self.pending or self.firing)


class NodeState(BaseModel):
    node: str
    #: bumped on every write to the table (tailhound.streams.processor reuses its decoded copy while they match)
    version: int = 0
    #: event time of the last write
    persisted_at: float = 0.0
    last_ts: dict[str, float] = Field(default_factory=dict, description="newest ts seen per source and instance")
    rules: dict[str, RuleState] = Field(default_factory=dict)
    #: "signal|entity" -> [[ts, value], ...]: short histories for `growing_for` conditions
    history: dict[str, list[list[float]]] = Field(default_factory=dict)
    #: "signal|entity" -> RollingBaseline state, for signals rules compare with their baseline
    baselines: dict[str, dict] = Field(default_factory=dict)
    #: LatencyTracker state: windows of histogram deltas per (signal, engine) of this node
    latency: dict | None = None

    #: open incidents by domain (see tailhound.streams.correlate) and lone symptoms waiting for a cause
    incidents: dict[str, Episode] = Field(default_factory=dict)
    orphans: dict[str, float] = Field(default_factory=dict)
    #: models served on this node (from engine samples), for the incident scope, and engine -> model
    models: list[str] = Field(default_factory=list)
    engine_models: dict[str, str] = Field(default_factory=dict)
    _latest: LatestValues | None = PrivateAttr(default=None)
    # decoded forms of `latency` and `baselines`, written back by sync() before the state is stored
    _tracker: LatencyTracker | None = PrivateAttr(default=None)
    _baseline_objs: dict[str, RollingBaseline] = PrivateAttr(default_factory=dict)
    _dirty: set[str] = PrivateAttr(default_factory=set)

    def tracker(self, catalog: Catalog) -> LatencyTracker:
        if self._tracker is None:
            self._tracker = (LatencyTracker.from_dict(self.latency, catalog) if self.latency
                             else LatencyTracker(catalog=catalog))
        return self._tracker

    def baseline_of(self, key: str) -> RollingBaseline | None:
        objs = self.__pydantic_private__["_baseline_objs"]  # type: ignore[index]  # (getattr of a private is slow)
        obj = objs.get(key)
        if obj is None and key in self.baselines:
            obj = objs[key] = RollingBaseline.from_dict(self.baselines[key])
        return obj

    def sync(self) -> None:
        """Write the decoded windows and baselines back into the stored fields (before a dump)."""
        if "latency" in self._dirty and self._tracker is not None:
            self.latency = self._tracker.to_dict()
        for key in self._dirty - {"latency"}:
            self.baselines[key] = self._baseline_objs[key].to_dict()
        self._dirty.clear()


def source_key(snapshot: Snapshot) -> str:
    """Redelivery is detected per source *and* instance: two vLLM servers on one node scrape apart."""
    inst = snapshot.labels.get("instance") or snapshot.labels.get("target") or snapshot.labels.get("endpoint")
    return f"{snapshot.source}|{inst}" if inst else snapshot.source


def evaluate(
    state: NodeState | None,
    snapshot: Snapshot,
    rules: RuleSet,
    catalog: Catalog | None = None,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
    latest: LatestValues | None = None,
    copy: bool = True,
    models: dict[str, LoadModel] | None = None,
    sla: dict[str, dict[str, float]] | None = None,
) -> tuple[NodeState, list[IncidentEvent]]:
    """One snapshot of a node: update what the node reports, step every rule that reads it.

    `latest` is the node's in-memory view (the processor keeps one per node); without it the state
    carries one privately, so calling evaluate() in a loop works too.
    """
    carried = state._latest if state is not None else None
    if state is None:
        state = NodeState(node=snapshot.node)
    elif copy:  # the caller keeps its state object as it was (the processor passes a fresh one: copy=False)
        state = state.model_copy(deep=True)
    if latest is None:
        latest = carried if carried is not None else LatestValues()
    state._latest = latest
    key = source_key(snapshot)
    last = state.last_ts.get(key)
    if last is not None and snapshot.ts <= last:
        return state, []
    state.last_ts[key] = snapshot.ts
    catalog = catalog or default_catalog()
    scan = snapshot_values(snapshot, catalog)
    fresh = scan.values
    if scan.histogram_deltas:
        fresh.update(_latency_values(state, snapshot, catalog))
    latest.update(fresh, snapshot.ts, snapshot.interval_s)
    _remember_models(state, scan.models)
    view = latest.current(snapshot.ts)  # computed per signal as rules read it
    _add_sla(view, state, sla)
    _record_history(state, rules, fresh, snapshot.ts)
    _add_demand(view, state, rules, snapshot.ts)
    _learn_baselines(state, rules, view, fresh, snapshot.ts)
    ctx = EvalContext(now=snapshot.ts, values=view, last_seen=latest.seen(), catalog=catalog,  # type: ignore[arg-type]
                      history=lambda s, e: _history(state, s, e),
                      baseline=lambda s, e: _baseline(state, s, e, view, models))
    updated = set(fresh)
    for f in updated & _DERIVED_BY_INPUT.keys():
        updated.update(_DERIVED_BY_INPUT[f])
    for plan in plans_for(rules, catalog):
        rs = state.rules.get(plan.name)
        if rs is None:
            if plan.reads.isdisjoint(updated) and not plan.has_absence:
                continue  # nothing it reads changed and it holds no state: stepping it would change nothing
            pending, firing = {}, {}  # a RuleState only if it ends up holding something
        else:
            pending, firing = rs.pending, rs.firing
        if plan.has_absence or any(signal in view for signal in plan.reads):
            _step_entities(pending, firing, plan, ctx, snapshot.ts, catalog)
        _expire_stale(pending, firing, snapshot.ts, stale_after_s)
        if not (pending or firing):
            if rs is not None:
                del state.rules[plan.name]
        elif rs is None:
            rs = state.rules[plan.name] = RuleState()
            rs.pending.update(pending)
            rs.firing.update(firing)
    firing = {
        name: Firing(entities=sorted(rs.firing, key=entity_order), since=min(f.since for f in rs.firing.values()),
                     evidence=[ev for e in sorted(rs.firing, key=entity_order) for ev in rs.firing[e].evidence])
        for name, rs in state.rules.items() if rs.firing and rules.by_name(name) is not None
    }
    pending = {name for name, rs in state.rules.items() if set(rs.pending) - set(rs.firing)}
    events = correlate(state.incidents, state.orphans, firing, rules, snapshot, state.models, pending)
    if copy:
        state.sync()
    return state, events


def _remember_models(state: NodeState, models: list[tuple[str, str | None]]) -> None:
    """The models of a snapshot's samples (sample label, else the snapshot's), and engine -> model."""
    for model, engine in models:
        if model not in state.models:
            state.models = sorted([*state.models, model])[:8]
        if engine and state.engine_models.get(engine) != model and len(state.engine_models) < 64:
            state.engine_models[engine] = model


DEFAULT_SLA = {"ttft_p99_sla_s": {"*": 1.5}}
#: (patterns, model) -> the first matching pattern's limit (fnmatch per engine and snapshot added up)
_SLA_LIMITS: dict[tuple[tuple[tuple[str, float], ...], str], float | None] = {}


def _sla_limit(patterns: dict[str, float], model: str) -> float | None:
    key = (tuple(patterns.items()), model)
    if key not in _SLA_LIMITS:
        if len(_SLA_LIMITS) > 4096:
            _SLA_LIMITS.clear()
        _SLA_LIMITS[key] = next((v for pat, v in patterns.items() if fnmatch.fnmatchcase(model, pat)), None)
    return _SLA_LIMITS[key]


def _add_sla(view: CurrentValues | SignalValues, state: NodeState, sla: dict[str, dict[str, float]] | None) -> None:
    """``sla.ttft_p99`` per engine from the engine's model (settings.streams.ttft_p99_sla_s); computed when a
    rule first reads it (nothing it depends on changes later in the step)."""
    for signal, field in SLA_SIGNALS.items():
        patterns = (sla or DEFAULT_SLA).get(field) or DEFAULT_SLA[field]

        def limits(patterns: dict[str, float] = patterns) -> dict[str, float]:
            engines = set((view.get("engine.requests_running") or {}).keys()) | set(state.engine_models)
            values = {}
            for engine in engines:
                limit = _sla_limit(patterns, state.engine_models.get(engine, ""))
                if limit is not None:
                    values[engine] = limit
            return values

        if isinstance(view, CurrentValues):
            view.provide(signal, limits)
        elif values := limits():
            view[signal] = values


def _add_demand(view: CurrentValues | SignalValues, state: NodeState, rules: RuleSet, now: float) -> None:
    """``engine.arrival_rate`` when a rule reads it (computed on first read, from the view and history)."""
    if ARRIVAL_RATE not in rules.reads:
        return

    def compute() -> dict[str, float]:
        return arrival_rates(view, lambda s, e: _history(state, s, e), now)  # type: ignore[arg-type]

    if isinstance(view, CurrentValues):
        view.provide(ARRIVAL_RATE, compute)
    elif values := compute():
        view[ARRIVAL_RATE] = values


def _latency_values(state: NodeState, snapshot: Snapshot, catalog: Catalog) -> SignalValues:
    """Feed histogram deltas into the node's latency windows; their percentiles per engine."""
    tracker = state.tracker(catalog)
    if not tracker.observe(snapshot):
        return {}
    state._dirty.add("latency")
    return tracker.engine_values(snapshot.ts, snapshot.node)


def _derived_inputs() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for name, (_per, inputs) in DERIVED_SIGNALS.items():
        for x in inputs:
            out.setdefault(x, []).append(name)
    for name, inputs in RATE_RATIOS.items():
        for x in inputs:
            out.setdefault(x, []).append(name)
    for name, (_per, mask, _bits) in FLAG_SIGNALS.items():
        out.setdefault(mask, []).append(name)
    for x in (*INFLIGHT, FINISHED):
        out.setdefault(x, []).append(ARRIVAL_RATE)
    return {k: tuple(v) for k, v in out.items()}


#: input signal -> the derived signals computed from it
_DERIVED_BY_INPUT = _derived_inputs()
#: derived signal -> its inputs
_INPUTS_OF: dict[str, tuple[str, ...]] = {}
for _input, _derived in _DERIVED_BY_INPUT.items():
    for _name in _derived:
        _INPUTS_OF[_name] = (*_INPUTS_OF.get(_name, ()), _input)


def _inputs_fresh(signal: str, fresh: SignalValues) -> bool:
    return any(i in fresh for i in _INPUTS_OF.get(signal, ()))


#: History kept per series for trend conditions: the longest `growing_for` plus a margin, bounded.
MAX_HISTORY_POINTS = 120


def _record_history(state: NodeState, rules: RuleSet, fresh: SignalValues, ts: float) -> None:
    for signal, window in rules.history_windows.items():
        for entity, value in (fresh.get(signal) or {}).items():
            pts = state.history.setdefault(f"{signal}|{entity}", [])
            pts.append([ts, value])
            cutoff = ts - window * 1.5
            while pts and (pts[0][0] < cutoff or len(pts) > MAX_HISTORY_POINTS):
                pts.pop(0)


def _learn_baselines(state: NodeState, rules: RuleSet, view: CurrentValues | SignalValues, fresh: SignalValues,
                     ts: float) -> None:
    """Feed every value a rule compares with its baseline, except while that entity is in an incident
    of a rule reading the signal (an incident must not raise its own baseline)."""
    private = state.__pydantic_private__  # type: ignore[union-attr]  # (getattr of a private is slow)
    for signal, (prefixes, readers) in rules.baseline_plan.items():
        how, base = split_baseline_key(signal)
        if base not in fresh and not any(p in fresh for p in prefixes) and not _inputs_fresh(base, fresh):
            continue  # neither the signal nor what it is derived from (latency.tpot for .p95) is new
        troubled = {e for name in readers if name in state.rules
                    for e in (*state.rules[name].firing, *state.rules[name].pending)}
        values = view.get(base) or {}
        if how is not None:  # a node-wide value: one baseline, troubled when any entity is
            reduced = reduce_values(how, list(values.values())) if values else None
            values = {} if reduced is None else {"": reduced}
            troubled = {""} if troubled else set()
        for entity, value in values.items():
            key = f"{signal}|{entity}"
            baseline = state.baseline_of(key) or RollingBaseline()
            if baseline.observe(ts, value, in_incident=entity in troubled):
                private["_baseline_objs"][key] = baseline
                private["_dirty"].add(key)


def _baseline(state: NodeState, signal: str, entity: str, view: CurrentValues | SignalValues,
              models: dict[str, LoadModel] | None) -> tuple[float, str] | None:
    """What `signal` should be for this entity: the load model's prediction for the current load when a
    model for the signal is loaded and covers that load, else the rolling baseline's median."""
    rolling = state.baseline_of(f"{signal}|{entity}")
    model = (models or {}).get(signal)
    features = features_of(view, entity) if model is not None else None  # type: ignore[arg-type]
    expected = expected_for(signal, features, model, rolling)
    return None if expected is None else (max(expected.value, 1e-9), expected.source)


def _history(state: NodeState, signal: str, entity: str) -> list[tuple[float, float]]:
    return [(t, v) for t, v in state.history.get(f"{signal}|{entity}", [])]


def _step_entities(pending: dict[str, float], firing: dict[str, FiringEntity], plan: RulePlan, ctx: EvalContext,
                   ts: float, catalog: Catalog) -> None:
    """Step a rule's entity states (its RuleState's `pending` and `firing`) at `ts`."""
    rule = plan.rule
    for e in plan.entities(ctx):
        verdict = plan.check(ctx, e)
        if verdict is None:
            continue  # a signal is missing for this entity: no news, keep the state as it is
        if verdict:
            since = pending.setdefault(e, ts)
            evidence = rule_evidence(rule, ctx, e, ts - since, catalog)
            if e in firing:
                firing[e].last_true = ts
                firing[e].evidence = evidence
            elif ts - since >= rule.for_:
                firing[e] = FiringEntity(since=since, last_true=ts, evidence=evidence)
        else:
            pending.pop(e, None)
            f = firing.get(e)
            if f is not None and ts - f.last_true >= rule.keep_firing_for:
                del firing[e]


def _expire_stale(pending: dict[str, float], firing: dict[str, FiringEntity], ts: float, stale_after_s: float
                  ) -> None:
    if firing:
        for e in [e for e, f in firing.items() if ts - f.last_true > max(stale_after_s, 0.0)]:
            del firing[e]
            pending.pop(e, None)
    if pending:
        for e in [e for e, since in pending.items() if e not in firing and ts - since > stale_after_s * 4]:
            del pending[e]
