"""Windows: what rules compare with -- the short histories of trend conditions (``growing_for``), demand
(``engine.arrival_rate``, :mod:`tailhound.streams.demand`) and the rolling baselines (learnt except
while the entity is in trouble) -- and the evaluation context the rules are judged in."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from ..baseline import RollingBaseline
from ..demand import ARRIVAL_RATE, FINISHED, INFLIGHT, arrival_rates
from ..extract import DERIVED_SIGNALS, FLAG_SIGNALS, RATE_RATIOS, SignalValues
from ..latest_values import CurrentValues
from ..loadmodel import LoadModel, expected_for, features_of
from ..node_state import NodeState
from ..ruleset.condition_eval import EvalContext
from ..ruleset.condition_eval import _reduce as reduce_values
from ..ruleset.crossings import count as crossing_count
from ..ruleset.crossings import record as record_crossings
from ..ruleset.rulefile import RuleSet, split_baseline_key
from ..series_history import SeriesHistory
from .step import Step


def stage(step: Step) -> bool:
    state, ts, view, models = step.state, step.snapshot.ts, step.view, step.load_models
    _record_history(state, step.rules, step.fresh, ts)
    _add_demand(view, state, step.rules, ts)
    _learn_baselines(state, step.rules, view, step.fresh, ts)
    step.ctx = EvalContext(
        now=ts,
        values=view,  # type: ignore[arg-type]
        last_seen=step.latest.seen(),  # type: ignore[arg-type]
        catalog=step.catalog,  # type: ignore[arg-type]
        history=lambda s, e: _history(state, s, e),
        baseline=lambda s, e: _baseline(state, s, e, view, models),
        crossings=lambda c, e, scope: crossing_count(state, c, e, scope, ts),
    )
    updated = set(step.fresh)
    for f in updated & DERIVED_BY_INPUT.keys():
        updated.update(DERIVED_BY_INPUT[f])
    step.updated = updated
    record_crossings(state, step.rules, step.ctx, updated, step.catalog)
    return True


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
DERIVED_BY_INPUT = _derived_inputs()
#: derived signal -> its inputs
_INPUTS_OF: dict[str, tuple[str, ...]] = {}
for _input, _derived in DERIVED_BY_INPUT.items():
    for _name in _derived:
        _INPUTS_OF[_name] = (*_INPUTS_OF.get(_name, ()), _input)


#: History kept per series for trend conditions: the longest `growing_for` plus a margin, bounded.
MAX_HISTORY_POINTS = 120


def _record_history(state: NodeState, rules: RuleSet, fresh: SignalValues, ts: float) -> None:
    for signal, window in rules.history_windows.items():
        for entity, value in (fresh.get(signal) or {}).items():
            key = f"{signal}|{entity}"
            pts = state.history.get(key)
            if pts is None:
                pts = state.history[key] = SeriesHistory()
            pts.append(ts, value)
            pts.trim(ts - window * 1.5, MAX_HISTORY_POINTS)


class _BaselineStep(NamedTuple):
    """One baseline key of a rule set, prepared once: what makes it worth a look in a snapshot."""

    key: str
    how: str | None  # the reduction of a node-wide key (``sum(x.rate)``), None per entity
    base: str  # the signal it learns
    triggers: frozenset[str]  # the signal, the names it can be derived from, its derived inputs
    readers: tuple[str, ...]  # the rules that read it


#: id(rule set) -> (rule set, its baseline steps); a few rule sets (reloads) at most
_STEPS: dict[int, tuple[RuleSet, list[_BaselineStep]]] = {}


def _baseline_steps(rules: RuleSet) -> list[_BaselineStep]:
    """`rules.baseline_plan` as :class:`_BaselineStep` rows (split keys, trigger sets), kept per rule set."""
    found = _STEPS.get(id(rules))
    if found is None or found[0] is not rules:
        steps = []
        for key, (prefixes, readers) in rules.baseline_plan.items():
            how, base = split_baseline_key(key)
            triggers = frozenset((base, *prefixes, *_INPUTS_OF.get(base, ())))
            steps.append(_BaselineStep(key, how, base, triggers, readers))
        if len(_STEPS) >= 8:  # old rule sets of reloads: let them go
            _STEPS.clear()
        found = _STEPS[id(rules)] = (rules, steps)
    return found[1]


def _learn_baselines(
    state: NodeState, rules: RuleSet, view: CurrentValues | SignalValues, fresh: SignalValues, ts: float
) -> None:
    """Feed every value a rule compares with its baseline, except while that entity is in an incident
    of a rule reading the signal (an incident must not raise its own baseline)."""
    private = cast("dict[str, Any]", state.__pydantic_private__)  # (getattr of a private is slow)
    fresh_names = fresh.keys()
    rule_states = state.rules
    for signal, how, base, triggers, readers in _baseline_steps(rules):
        if fresh_names.isdisjoint(triggers):
            continue  # neither the signal nor what it is derived from (latency.tpot for .p95) is new
        values = view.get(base)
        if not values:
            continue  # nothing to learn (and no baseline to create)
        troubled = {
            e
            for name in readers
            if name in rule_states
            for e in (*rule_states[name].firing, *rule_states[name].pending)
        }
        if how is not None:  # a node-wide value: one baseline, troubled when any entity is
            reduced = reduce_values(how, list(values.values()))
            values = {} if reduced is None else {"": reduced}
            troubled = {""} if troubled else set()
        for entity, value in values.items():
            key = f"{signal}|{entity}"
            baseline = state.baseline_of(key) or RollingBaseline()
            if baseline.observe(ts, value, in_incident=entity in troubled):
                private["_baseline_objs"][key] = baseline
                if not private["_shed"]:  # (after shed() sync() writes every decoded baseline anyway)
                    private["_dirty"].add(key)


def _baseline(
    state: NodeState, signal: str, entity: str, view: CurrentValues | SignalValues, models: dict[str, LoadModel] | None
) -> tuple[float, str] | None:
    """What `signal` should be for this entity: the load model's prediction for the current load when a
    model for the signal is loaded and covers that load, else the rolling baseline's median."""
    rolling = state.baseline_of(f"{signal}|{entity}")
    model = (models or {}).get(signal)
    features = features_of(view, entity) if model is not None else None  # type: ignore[arg-type]
    expected = expected_for(signal, features, model, rolling)
    return None if expected is None else (max(expected.value, 1e-9), expected.source)


def _history(state: NodeState, signal: str, entity: str) -> list[tuple[float, float]]:
    found = state.history.get(f"{signal}|{entity}")
    return found.points() if found is not None else []
