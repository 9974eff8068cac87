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

Rules read the node's merged view (:mod:`streams.nodesignals`): the latest value of every signal from
every source of the node, counter rates, and derived ratios; conditions are judged by
:mod:`streams.condition_eval`. Snapshots older than the newest already seen from the same source (and
instance) on the node are ignored, so a re-delivered message (at-least-once) changes nothing.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, PrivateAttr

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import Evidence, IncidentEvent, Scope
from tailhound.snapshot import Snapshot

from .baseline import RollingBaseline
from .condition_eval import EvalContext, entities_of, holds, observations
from .correlate import Episode, Firing, correlate
from .latency import LatencyTracker
from .loadmodel import LoadModel, expected_for, features_of
from .nodesignals import LatestValues, counter_rates
from .ruleset import Rule, RuleSet
from .signals import SignalValues, decode_clock_event_reasons, extract

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
    #: bumped on every write to the table (streams.processor reuses its decoded copy while they match)
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

    #: open incidents by domain (see streams.correlate) and lone symptoms waiting for a cause
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
        obj = self._baseline_objs.get(key)
        if obj is None and key in self.baselines:
            obj = self._baseline_objs[key] = RollingBaseline.from_dict(self.baselines[key])
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


def _snapshot_values(snapshot: Snapshot, catalog: Catalog) -> SignalValues:
    values = extract(snapshot, catalog)
    values.update(counter_rates(snapshot, catalog))
    return values


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
    fresh = _snapshot_values(snapshot, catalog)
    fresh.update(_latency_values(state, snapshot, catalog))
    latest.update(fresh, snapshot.ts, snapshot.interval_s)
    _remember_models(state, snapshot)
    view = latest.view(snapshot.ts)
    _add_sla(view, state, sla)
    _record_history(state, rules, fresh, snapshot.ts)
    _learn_baselines(state, rules, view, fresh, snapshot.ts)
    ctx = EvalContext(now=snapshot.ts, values=view, last_seen=latest.last_seen(), catalog=catalog,
                      history=lambda s, e: _history(state, s, e),
                      baseline=lambda s, e: _baseline(state, s, e, view, models))
    updated = set(fresh) | {d for f in fresh for d in _DERIVED_BY_INPUT.get(f, ())}
    for rule in rules.rules:
        reads = rule.signals()
        if not reads & updated and rule.name not in state.rules and not _has_absence(rule):
            continue
        rs = state.rules.setdefault(rule.name, RuleState())
        if reads & set(ctx.values) or _has_absence(rule):
            _step_entities(rs, rule, ctx, snapshot.ts, catalog)
        _expire_stale(rs, snapshot.ts, stale_after_s)
        if rs.is_idle():
            del state.rules[rule.name]
    firing = {
        name: Firing(entities=sorted(rs.firing, key=_entity_order), since=min(f.since for f in rs.firing.values()),
                     evidence=[ev for e in sorted(rs.firing, key=_entity_order) for ev in rs.firing[e].evidence])
        for name, rs in state.rules.items() if rs.firing and rules.by_name(name) is not None
    }
    pending = {name for name, rs in state.rules.items() if set(rs.pending) - set(rs.firing)}
    events = correlate(state.incidents, state.orphans, firing, rules, snapshot, state.models, pending)
    if copy:
        state.sync()
    return state, events


def _remember_models(state: NodeState, snapshot: Snapshot) -> None:
    for s in snapshot.samples:
        model = s.labels.get("model_name") or snapshot.labels.get("model_name")
        if not model:
            continue
        if model not in state.models:
            state.models = sorted([*state.models, model])[:8]
        engine = s.labels.get("engine") or snapshot.labels.get("instance")
        if engine and state.engine_models.get(engine) != model and len(state.engine_models) < 64:
            state.engine_models[engine] = model


DEFAULT_SLA = {"ttft_p99_sla_s": {"*": 1.5}}


def _add_sla(view: SignalValues, state: NodeState, sla: dict[str, dict[str, float]] | None) -> None:
    """``sla.ttft_p99`` per engine from the engine's model (settings.streams.ttft_p99_sla_s)."""
    import fnmatch

    from .signals import SLA_SIGNALS

    engines = set((view.get("engine.requests_running") or {}).keys()) | set(state.engine_models)
    for signal, field in SLA_SIGNALS.items():
        patterns = (sla or DEFAULT_SLA).get(field) or DEFAULT_SLA[field]
        values = {}
        for engine in engines:
            model = state.engine_models.get(engine, "")
            limit = next((v for pat, v in patterns.items() if fnmatch.fnmatchcase(model, pat)), None)
            if limit is not None:
                values[engine] = limit
        if values:
            view[signal] = values


def _latency_values(state: NodeState, snapshot: Snapshot, catalog: Catalog) -> SignalValues:
    """Feed histogram deltas into the node's latency windows; their percentiles per engine."""
    if not any(s.kind == "histogram" and s.delta is not None for s in snapshot.samples):
        return {}
    tracker = state.tracker(catalog)
    if not tracker.observe(snapshot):
        return {}
    state._dirty.add("latency")
    return tracker.engine_values(snapshot.ts, snapshot.node)


def _has_absence(rule: Rule) -> bool:
    return rule.has_absence


def _derived_inputs() -> dict[str, tuple[str, ...]]:
    from .nodesignals import RATE_RATIOS
    from .signals import DERIVED_SIGNALS, FLAG_SIGNALS

    out: dict[str, list[str]] = {}
    for name, (_per, inputs) in DERIVED_SIGNALS.items():
        for x in inputs:
            out.setdefault(x, []).append(name)
    for name, inputs in RATE_RATIOS.items():
        for x in inputs:
            out.setdefault(x, []).append(name)
    for name, (_per, mask, _bits) in FLAG_SIGNALS.items():
        out.setdefault(mask, []).append(name)
    return {k: tuple(v) for k, v in out.items()}


#: input signal -> the derived signals computed from it
_DERIVED_BY_INPUT = _derived_inputs()


#: History kept per series for trend conditions: the longest `growing_for` plus a margin, bounded.
MAX_HISTORY_POINTS = 120


def _record_history(state: NodeState, rules: RuleSet, fresh: SignalValues, ts: float) -> None:
    for signal, window in rules.trend_windows.items():
        for entity, value in (fresh.get(signal) or {}).items():
            pts = state.history.setdefault(f"{signal}|{entity}", [])
            pts.append([ts, value])
            cutoff = ts - window * 1.5
            while pts and (pts[0][0] < cutoff or len(pts) > MAX_HISTORY_POINTS):
                pts.pop(0)


def _learn_baselines(state: NodeState, rules: RuleSet, view: SignalValues, fresh: SignalValues, ts: float) -> None:
    """Feed every value a rule compares with its baseline, except while that entity is in an incident
    of a rule reading the signal (an incident must not raise its own baseline)."""
    for signal in rules.baseline_signals:
        if signal not in fresh and not any(signal.startswith(f"{f}.") for f in fresh):
            continue
        troubled = {e for rule in rules.rules if signal in rule.signals() and rule.name in state.rules
                    for e in (*state.rules[rule.name].firing, *state.rules[rule.name].pending)}
        for entity, value in (view.get(signal) or {}).items():
            key = f"{signal}|{entity}"
            baseline = state.baseline_of(key) or RollingBaseline()
            if baseline.observe(ts, value, in_incident=entity in troubled):
                state._baseline_objs[key] = baseline
                state._dirty.add(key)


def _baseline(state: NodeState, signal: str, entity: str, view: SignalValues,
              models: dict[str, LoadModel] | None) -> tuple[float, str] | None:
    """What `signal` should be for this entity: the load model's prediction for the current load when a
    model for the signal is loaded and covers that load, else the rolling baseline's median."""
    rolling = state.baseline_of(f"{signal}|{entity}")
    model = (models or {}).get(signal)
    features = features_of(view, entity) if model is not None else None
    expected = expected_for(signal, features, model, rolling)
    return None if expected is None else (max(expected.value, 1e-9), expected.source)


def _history(state: NodeState, signal: str, entity: str) -> list[tuple[float, float]]:
    return [(t, v) for t, v in state.history.get(f"{signal}|{entity}", [])]


def _step_entities(rs: RuleState, rule: Rule, ctx: EvalContext, ts: float, catalog: Catalog) -> None:
    scope = rule.scope.value
    leaves = rule.leaves()
    for e in entities_of(leaves, ctx, scope):
        verdict = holds(rule.when, ctx, e, scope)
        if verdict is None:
            continue  # a signal is missing for this entity: no news, keep the state as it is
        if verdict:
            since = rs.pending.setdefault(e, ts)
            evidence = _evidence(rule, ctx, e, ts - since, catalog)
            if e in rs.firing:
                rs.firing[e].last_true = ts
                rs.firing[e].evidence = evidence
            elif ts - since >= rule.for_:
                rs.firing[e] = FiringEntity(since=since, last_true=ts, evidence=evidence)
        else:
            rs.pending.pop(e, None)
            f = rs.firing.get(e)
            if f is not None and ts - f.last_true >= rule.keep_firing_for:
                del rs.firing[e]


def _expire_stale(rs: RuleState, ts: float, stale_after_s: float) -> None:
    for e in [e for e, f in rs.firing.items() if ts - f.last_true > max(stale_after_s, 0.0)]:
        del rs.firing[e]
        rs.pending.pop(e, None)
    for e in [e for e, since in rs.pending.items() if e not in rs.firing and ts - since > stale_after_s * 4]:
        del rs.pending[e]


#: Latency percentiles are always shown with the load of the same window (the token mix and the
#: running requests): a P95 means little without what was asked of the engine.
LOAD_CONTEXT = ("tokens.prompt.mean", "tokens.generation.mean", "engine.requests_running")


def _evidence(rule: Rule, ctx: EvalContext, entity: str, held_s: float, catalog: Catalog) -> list[Evidence]:
    labels = {rule.scope.value: entity} if entity else {}
    out = observations(rule.leaves(), ctx, entity, rule.scope.value, held_s, labels)
    context = list(rule.context)
    if any(ev.signal.startswith(("latency.", "max(latency.", "min(latency.")) for ev in out):
        context += [c for c in LOAD_CONTEXT if c not in context]
    shown = {ev.signal for ev in out}
    for signal in context:
        if signal in shown:
            continue
        per = ctx.per(signal)
        if per and per != (rule.scope.value,):
            continue  # a finer or other-scope signal without a reduce: not this entity's
        v = (ctx.values.get(signal) or {}).get(entity if per else "")
        if v is not None:
            spec = catalog.spec(signal) or catalog.spec(signal.rpartition(".")[0])
            detail = _DETAIL[signal](v) if signal in _DETAIL else ""
            out.append(Evidence(signal=signal, value=round(v, 4), op="=", unit=spec.unit if spec else "",
                                labels=labels, detail=detail))
    return out


def _clock_event_detail(mask: float) -> str:
    return f"0x{int(mask):x} (" + (", ".join(decode_clock_event_reasons(mask)) or "no clock event reason") + ")"


#: How to spell out a context value for a person.
_DETAIL = {"gpu.clock_event_reasons": _clock_event_detail}


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_.]*)\}")


def render_action(template: str, scope: Scope, evidence: list[Evidence]) -> str:
    """Fill ``{node}``, ``{gpus}``, ``{model}``, ``{engine}`` and ``{<signal>}`` (max over evidence)."""
    values: dict[str, str] = {
        "node": scope.node or "?",
        "gpus": ",".join(scope.gpus) or "?",
        "model": scope.model or "?",
        "engine": scope.engine or "?",
    }
    for ev in evidence:
        cur = values.get(ev.signal)
        if cur is None or float(cur) < ev.value:
            values[ev.signal] = f"{ev.value:g}"
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _entity_order(e: str) -> tuple[int, str]:
    return (int(e), "") if e.isdigit() else (1 << 30, e)
