"""Transition counters (pure): how many times a rule's comparison changed verdict within a window.

A leaf such as ``{signal: engine.requests_running, at_most: 0, crossed: {times: 3, within: 10m}}`` holds
when "running requests are zero" turned true or false at least 3 times in the last 10 minutes: traffic
that drops to zero and comes back, again and again (PromQL ``changes()`` over a boolean). The windows stage
judges every such comparison once per snapshot that changes its signal (:func:`record`) and keeps, per
comparison and entity, only the last verdict, when it was last judged and the newest change times, in
``NodeState.crossings``; :func:`count` answers the rules. A judgement with a signal missing changes nothing
(an engine that is down is not "zero"), and the first judgement of an entity is no change.
"""

from __future__ import annotations

from tailhound.catalog import Catalog

from ..node_state import NodeState
from .condition_eval import EvalContext, limit_of, value_of
from .conditions import MAX_CROSSING_TIMES, Ref, SignalCondition
from .plan import RulePlan, plans_for
from .rulefile import RuleSet

#: At most this many counters per node (comparisons x entities); new entities beyond it are not counted.
MAX_CROSSING_KEYS = 512
#: An entity not judged for this long past its window is forgotten (its engine or GPU went away).
FORGET_AFTER_S = 600.0

_VERDICT, _JUDGED, _TIMES = 0, 1, 2


def leaf_key(cond: SignalCondition, scope: str) -> str:
    """The stored name of a counted comparison: its scope and the comparison (``engine:x <= 0``)."""
    name = f"{cond.reduce.value}({cond.signal})" if cond.reduce else cond.signal
    b = cond.bound
    rhs = b.describe() if isinstance(b, Ref) else f"{b:g}"
    return f"{scope}:{name} {cond.symbol} {rhs}"


#: id(rule set) -> (the rule set, its catalog, [(key, leaf, scope, window, rule plans)]): found once
_PLANS: dict[int, tuple[RuleSet, Catalog, list[tuple[str, SignalCondition, str, float, tuple[RulePlan, ...]]]]] = {}


def counted_leaves(
    rules: RuleSet, catalog: Catalog
) -> list[tuple[str, SignalCondition, str, float, tuple[RulePlan, ...]]]:
    """Every comparison some rule counts: (key, leaf, scope, longest window, the plans of the rules reading it)."""
    found = _PLANS.get(id(rules))
    if found is not None and found[0] is rules and found[1] is catalog:
        return found[2]
    plans = {p.name: p for p in plans_for(rules, catalog)}
    by_key: dict[str, tuple[SignalCondition, str, float, tuple[RulePlan, ...]]] = {}
    for rule in rules.rules:
        for leaf in rule.thresholds():
            if leaf.crossed is None:
                continue
            key = leaf_key(leaf, rule.scope.value)
            _, _, window, readers = by_key.get(key, (leaf, "", 0.0, ()))
            by_key[key] = (leaf, rule.scope.value, max(window, leaf.crossed.within), (*readers, plans[rule.name]))
    plan = [(key, *v) for key, v in by_key.items()]
    if len(_PLANS) > 16:
        _PLANS.clear()
    _PLANS[id(rules)] = (rules, catalog, plan)
    return plan


#: id(leaf) -> (the leaf, the signals it compares)
_READS: dict[int, tuple[SignalCondition, tuple[str, ...]]] = {}


def _reads(leaf: SignalCondition) -> tuple[str, ...]:
    found = _READS.get(id(leaf))
    if found is None or found[0] is not leaf:
        if len(_READS) > 256:
            _READS.clear()
        found = _READS[id(leaf)] = (leaf, tuple(leaf.signals()))
    return found[1]


def _verdict(cond: SignalCondition, ctx: EvalContext, entity: str, scope: str) -> bool | None:
    v = value_of(ctx, cond.signal, cond.reduce, entity, scope)
    if v is None:
        return None
    if cond.min_observations is not None:
        n = value_of(ctx, f"{cond.signal.rpartition('.')[0]}.window_count", cond.reduce, entity, scope)
        if n is None or n < cond.min_observations:
            return None
    limit = limit_of(ctx, cond, entity, scope)
    return None if limit is None else cond.compare(v, limit[0])


def record(state: NodeState, rules: RuleSet, ctx: EvalContext, updated: set[str], catalog: Catalog) -> None:
    """Judge every counted comparison whose signals this snapshot changed, for the entities its rules
    judge now, and note each change of verdict; forget counters of rules and entities that are gone."""
    plan = counted_leaves(rules, catalog)
    store = state.crossings
    if not plan:
        if store:
            store.clear()  # no rule counts anything (a reload)
        return
    now = ctx.now
    judged = False
    for key, leaf, scope, _window, readers in plan:
        if updated.isdisjoint(_reads(leaf)):
            continue  # nothing it compares changed: its verdict cannot have either
        judged = True
        entities: set[str] = set()
        for reader in readers:
            entities.update(reader.entities(ctx))
        for entity in entities:
            verdict = _verdict(leaf, ctx, entity, scope)
            if verdict is None:
                continue
            slot = f"{key}|{entity}"
            entry = store.get(slot)
            if entry is None or len(entry) < _TIMES:  # (a malformed stored counter starts again)
                if entry is not None or len(store) < MAX_CROSSING_KEYS:
                    store[slot] = [float(verdict), now]
                continue
            entry[_JUDGED] = now
            if bool(entry[_VERDICT]) != verdict:
                entry[_VERDICT] = float(verdict)
                entry.append(now)
                if len(entry) - _TIMES > MAX_CROSSING_TIMES:
                    del entry[_TIMES]
    if judged and store:  # (old change times only matter once counted, at the next judgement)
        _forget(store, {key: window for key, _leaf, _scope, window, _readers in plan}, now)


def _forget(store: dict[str, list[float]], windows: dict[str, float], now: float) -> None:
    for slot in list(store):
        entry = store[slot]
        window = windows.get(slot.rpartition("|")[0])
        if window is None or now - entry[_JUDGED] > window + FORGET_AFTER_S:
            del store[slot]
            continue
        times = entry[_TIMES:]
        if times and times[0] < now - window:
            entry[_TIMES:] = [t for t in times if t >= now - window]


def count(state: NodeState, cond: SignalCondition, entity: str, scope: str, now: float) -> int | None:
    """How many times `cond`'s comparison changed for `entity` within its `crossed.within` (None: never judged)."""
    if cond.crossed is None:
        return None
    entry = state.crossings.get(f"{leaf_key(cond, scope)}|{entity}")
    if entry is None:
        return None
    start = now - cond.crossed.within
    return sum(1 for t in entry[_TIMES:] if t >= start)
