"""Rules compiled once into closures, so a snapshot does not walk condition models (pure).

:func:`tailhound.streams.ruleset.condition_eval.holds` interprets a ``when:`` tree: per leaf it dispatches on the model
type, looks the signal's entity labels up, builds the right-hand side and compares. The worker judges
every rule that reads a snapshot's signals for every entity, ~10 rules x 8 GPUs per dcgm snapshot,
so :class:`RulePlan` does that work once per rule: it resolves each leaf's signal, reduction and bound
to a closure with the same answers as ``holds`` (True, False or None for "no news"), and keeps what
:func:`tailhound.streams.ruleset.condition_eval.entities_of` needs. ``all``/``any`` stop at the first False/True, which
gives the same answer (the other children only read). ``any`` is False once a branch is judged false and
none holds, even if other branches lack their signals (see ``holds``).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable
from dataclasses import dataclass

from tailhound.catalog import Catalog

from ..extract import signal_per
from .condition_eval import MIN_PEERS, EvalContext, _reduce, peer_median, rising
from .conditions import Absent, AllOf, AnyOf, NotOf, Reduce, Ref, SignalCondition
from .rulefile import Rule, RuleSet, baseline_key

#: (ctx, entity) -> True / False / None (no news)
Check = Callable[[EvalContext, str], "bool | None"]
#: (ctx, entity) -> the value, or None when missing
Value = Callable[[EvalContext, str], "float | None"]

_COMPARE = {"above": operator.gt, "at_least": operator.ge, "below": operator.lt, "at_most": operator.le}


def entity_order(e: str) -> tuple[int, str]:
    return (int(e), "") if e.isdigit() else (1 << 30, e)


def compile_value(signal: str, reduce: Reduce | None, scope: str, catalog: Catalog) -> Value:
    """:func:`tailhound.streams.ruleset.condition_eval.value_of` for one (signal, reduce, scope)."""
    per = signal_per(signal, catalog) or ()
    if reduce is None:
        if not per:

            def node_value(ctx: EvalContext, _entity: str) -> float | None:
                vals = ctx.values.get(signal)
                return vals.get("") if vals else None

            return node_value

        def own_value(ctx: EvalContext, entity: str) -> float | None:
            vals = ctx.values.get(signal)
            return vals.get(entity) if vals else None

        return own_value
    members_of_entity = bool(per) and per[0] == scope and len(per) > 1
    empty_ok = reduce == Reduce.COUNT
    #: (context, values, result) of the last reduction over all entities: every entity of a step shares it
    memo: list = [None, None, None]

    def reduced(ctx: EvalContext, entity: str) -> float | None:
        vals = ctx.values.get(signal) or {}
        if members_of_entity:
            members = [v for e, v in vals.items() if e.split("/", 1)[0] == entity]
        elif memo[0] is ctx and memo[1] is vals:
            return memo[2]
        else:
            members = list(vals.values())
        result = None if not members and not empty_ok else _reduce(reduce, members)
        if not members_of_entity:
            memo[:] = (ctx, vals, result)
        return result

    return reduced


def _median_without(ordered: list[float], own: float | None) -> float | None:
    """:func:`tailhound.streams.ruleset.condition_eval.peer_median` from the sorted values of every entity, less one of
    value `own` (None: the entity has none), without sorting again per entity."""
    n = len(ordered) - (own is not None)
    if n < MIN_PEERS:
        return None
    skip = bisect.bisect_left(ordered, own) if own is not None else n + 1

    def at(i: int) -> float:
        return ordered[i] if i < skip else ordered[i + 1]

    half = n // 2
    return at(half) if n % 2 else (at(half - 1) + at(half)) / 2


def _compile_limit(cond: SignalCondition, scope: str, catalog: Catalog) -> Value:
    """:func:`tailhound.streams.ruleset.condition_eval.limit_of`'s value (its source only matters for evidence)."""
    b = cond.bound
    if not isinstance(b, Ref):
        limit = float(b)  # type: ignore[arg-type]
        return lambda _ctx, _entity: limit
    if b.baseline is not None:
        times, signal, node_wide = b.baseline, baseline_key(cond.signal, cond.reduce), cond.reduce is not None

        def baseline(ctx: EvalContext, entity: str) -> float | None:
            found = ctx.baseline(signal, "" if node_wide else entity)
            return None if found is None else found[0] * times

        return baseline
    if b.peers is not None:
        left, share = cond.signal, b.peers

        memo: list = [None, None, None]  # (context, values, their sorted values; None with a NaN among them)

        def peers(ctx: EvalContext, entity: str) -> float | None:
            vals = ctx.values.get(left)
            if not vals:
                return None
            if memo[0] is not ctx or memo[1] is not vals:
                ordered = sorted(vals.values())
                memo[:] = (ctx, vals, None if any(v != v for v in ordered) else ordered)
            ordered = memo[2]
            # (with a NaN, sorting orders nothing: the plain median of the others, as the interpreter takes it)
            median = peer_median(vals, entity) if ordered is None else _median_without(ordered, vals.get(entity))
            return None if median is None else median * share

        return peers
    other_value, factor = compile_value(b.signal or "", b.reduce, scope, catalog), b.times

    def other(ctx: EvalContext, entity: str) -> float | None:
        v = other_value(ctx, entity)
        return None if v is None else v * factor

    return other


def _compile_signal(cond: SignalCondition, scope: str, catalog: Catalog) -> Check:
    plain = _compile_plain(cond, catalog)
    if plain is not None:
        return plain
    value = compile_value(cond.signal, cond.reduce, scope, catalog)
    min_obs = cond.min_observations
    count = (
        compile_value(f"{cond.signal.rpartition('.')[0]}.window_count", cond.reduce, scope, catalog)
        if min_obs is not None
        else None
    )
    compare = _COMPARE[cond.op] if cond.op is not None else None
    limit = _compile_limit(cond, scope, catalog) if compare is not None else None
    growing_for, signal = cond.growing_for, cond.signal

    def check(ctx: EvalContext, entity: str) -> bool | None:
        v = value(ctx, entity)
        if v is None:
            return None
        if count is not None:
            n = count(ctx, entity)
            if n is None or n < min_obs:  # type: ignore[operator]
                return None
        verdict = True
        if compare is not None:
            lim = limit(ctx, entity)  # type: ignore[misc]
            if lim is None:
                return None
            verdict = compare(v, lim)
        if verdict and growing_for is not None:
            return rising(ctx.history(signal, entity), growing_for, ctx.now)
        return verdict

    return check


def _compile_plain(cond: SignalCondition, catalog: Catalog) -> Check | None:
    """The check of the most common leaf, a signal's own value against a fixed number (``gpu.temp above
    85``), in one closure; None for any other leaf. It answers as the general check: None without a value."""
    b = cond.bound
    if cond.reduce is not None or cond.min_observations is not None or cond.growing_for is not None:
        return None
    if cond.op is None or isinstance(b, Ref) or b is None:
        return None
    compare, limit, signal = _COMPARE[cond.op], float(b), cond.signal
    if not signal_per(signal, catalog):

        def node_check(ctx: EvalContext, _entity: str) -> bool | None:
            vals = ctx.values.get(signal)
            v = vals.get("") if vals else None
            return None if v is None else compare(v, limit)

        return node_check

    def own_check(ctx: EvalContext, entity: str) -> bool | None:
        vals = ctx.values.get(signal)
        v = vals.get(entity) if vals else None
        return None if v is None else compare(v, limit)

    return own_check


def _compile_absent(cond: Absent, catalog: Catalog) -> Check:
    signal, for_ = cond.absent, cond.for_
    node_level = not signal_per(signal, catalog)

    def check(ctx: EvalContext, entity: str) -> bool | None:
        seen = ctx.last_seen.get(signal) or {}
        last = seen.get("" if node_level else entity)
        if last is None:
            return None  # never seen: nothing went missing
        return ctx.now - last >= for_

    return check


def _compile_crossed(cond: SignalCondition, scope: str) -> Check:
    times = cond.crossed.times  # type: ignore[union-attr]

    def check(ctx: EvalContext, entity: str) -> bool | None:
        n = ctx.crossings(cond, entity, scope)
        return None if n is None else n >= times

    return check


def compile_condition(cond: object, scope: str, catalog: Catalog) -> Check:
    """A closure answering :func:`tailhound.streams.ruleset.condition_eval.holds` for `cond`."""
    if isinstance(cond, SignalCondition) and cond.crossed is not None:
        return _compile_crossed(cond, scope)
    if isinstance(cond, SignalCondition):
        return _compile_signal(cond, scope, catalog)
    if isinstance(cond, Absent):
        return _compile_absent(cond, catalog)
    if isinstance(cond, AllOf):
        parts = tuple(compile_condition(c, scope, catalog) for c in cond.all)

        def all_of(ctx: EvalContext, entity: str) -> bool | None:
            unknown = False
            for part in parts:
                r = part(ctx, entity)
                if r is False:
                    return False
                if r is None:
                    unknown = True
            return None if unknown else True

        return all_of
    if isinstance(cond, AnyOf):
        parts = tuple(compile_condition(c, scope, catalog) for c in cond.any)

        def any_of(ctx: EvalContext, entity: str) -> bool | None:
            judged = False
            for part in parts:
                r = part(ctx, entity)
                if r is True:
                    return True
                if r is False:
                    judged = True
            return False if judged else None

        return any_of
    if isinstance(cond, NotOf):
        inner = compile_condition(cond.not_, scope, catalog)

        def not_of(ctx: EvalContext, entity: str) -> bool | None:
            r = inner(ctx, entity)
            return None if r is None else not r

        return not_of
    raise TypeError(f"unknown condition {cond!r}")


@dataclass(frozen=True)
class RulePlan:
    """One rule, resolved against a catalog: what it reads and how to judge an entity."""

    rule: Rule
    name: str
    scope: str
    reads: frozenset[str]
    has_absence: bool
    check: Check
    #: signals whose entities are the rule's entities (per == scope, no reduce), absences likewise
    entity_signals: tuple[str, ...]
    absent_signals: tuple[str, ...]
    #: some leaf reads an entity-level signal without a reduce (else the node itself is judged)
    per_entity: bool

    @classmethod
    def of(cls, rule: Rule, catalog: Catalog) -> RulePlan:
        scope = rule.scope.value
        leaves = rule.leaves()

        def per(signal: str) -> tuple[str, ...]:
            return signal_per(signal, catalog) or ()

        return cls(
            rule=rule,
            name=rule.name,
            scope=scope,
            reads=rule.signals(),
            has_absence=rule.has_absence,
            check=compile_condition(rule.when, scope, catalog),
            entity_signals=tuple(
                dict.fromkeys(
                    leaf.signal
                    for leaf in leaves
                    if isinstance(leaf, SignalCondition) and leaf.reduce is None and per(leaf.signal) == (scope,)
                )
            ),
            absent_signals=tuple(
                dict.fromkeys(
                    leaf.absent for leaf in leaves if isinstance(leaf, Absent) and per(leaf.absent) == (scope,)
                )
            ),
            per_entity=any(
                isinstance(leaf, SignalCondition) and leaf.reduce is None and per(leaf.signal) for leaf in leaves
            ),
        )

    def entities(self, ctx: EvalContext) -> list[str]:
        """The entities the rule can judge now, in order (``condition_eval.entities_of``)."""
        found: set[str] = set()
        for signal in self.entity_signals:
            vals = ctx.values.get(signal)
            if vals:
                found.update(vals)
        for signal in self.absent_signals:
            seen = ctx.last_seen.get(signal)
            if seen:
                found.update(seen)
        if not found:
            return [""] if self.scope == "node" or not self.per_entity else []
        key = frozenset(found)
        ordered = _ORDERED.get(key)
        if ordered is None:
            ordered = sorted(found, key=entity_order)
            if len(_ORDERED) < 4096:
                _ORDERED[key] = ordered
        return list(ordered)


#: entity set -> its sorted list (the same few sets come back with every snapshot)
_ORDERED: dict[frozenset[str], list[str]] = {}


def plans_for(rules: RuleSet, catalog: Catalog) -> list[RulePlan]:
    """The rules of `rules` compiled against `catalog` (kept on the rule set, per catalog)."""
    cache = rules.plan_cache
    found = cache.get(id(catalog))
    if found is None or found[0] is not catalog:
        found = cache[id(catalog)] = (catalog, [RulePlan.of(rule, catalog) for rule in rules.rules])
    return found[1]
