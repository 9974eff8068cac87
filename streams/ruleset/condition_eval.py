"""Evaluating a rule's `when:` for one entity against what a node currently reports (pure).

:class:`EvalContext` is the node's view at one event time: current values per signal and entity, when
each was last seen, and lookups for baselines and short histories. Every function answers True, False
or None ("no news": a signal is missing), and :func:`observations` turns the leaves into evidence.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import Evidence

from ..extract import SignalValues, signal_per
from .conditions import Absent, AllOf, AnyOf, NotOf, Reduce, Ref, SignalCondition

#: (signal, entity) -> the baseline value to compare against, and where it came from
BaselineLookup = Callable[[str, str], tuple[float, str] | None]
#: (signal, entity) -> [(ts, value), ...] oldest first
HistoryLookup = Callable[[str, str], list[tuple[float, float]]]
#: (condition, entity, scope) -> how often its comparison changed within `crossed.within` (None: never judged)
CrossingLookup = Callable[[SignalCondition, str, str], "int | None"]
#: a peer comparison needs at least this many other entities reporting the signal (else: no news)
MIN_PEERS = 2


@dataclass
class EvalContext:
    now: float
    values: SignalValues
    last_seen: dict[str, dict[str, float]] = field(default_factory=dict)
    baseline: BaselineLookup = lambda _s, _e: None
    history: HistoryLookup = lambda _s, _e: []
    crossings: CrossingLookup = lambda _c, _e, _s: None
    catalog: Catalog = field(default_factory=default_catalog)

    def per(self, signal: str) -> tuple[str, ...]:
        return signal_per(signal, self.catalog) or ()


def _reduce(how: Reduce | str, vals: list[float]) -> float | None:
    if how == Reduce.COUNT:
        return float(len(vals))
    if not vals:
        return None
    if how == Reduce.MAX:
        return max(vals)
    if how == Reduce.MIN:
        return min(vals)
    if how == Reduce.SUM:
        return sum(vals)
    return sum(vals) / len(vals)


def value_of(ctx: EvalContext, signal: str, reduce: Reduce | None, entity: str, scope: str) -> float | None:
    """The value of `signal` for the rule's `entity`: its own, the node's, or reduced over the node
    (over the entity's members when the signal is finer, e.g. the NVLinks of one GPU)."""
    vals = ctx.values.get(signal) or {}
    per = ctx.per(signal)
    if reduce is None:
        return vals.get("" if not per else entity)
    if per and per[0] == scope and len(per) > 1:
        members = [v for e, v in vals.items() if e.split("/", 1)[0] == entity]
    else:
        members = list(vals.values())
    if not members and reduce != Reduce.COUNT:
        return None
    return _reduce(reduce, members)


def limit_of(ctx: EvalContext, cond: SignalCondition, entity: str, scope: str) -> tuple[float, str] | None:
    """The right-hand side: a constant, another signal (times k) or k x the baseline; with its source."""
    b = cond.bound
    if b is None:
        return None
    if not isinstance(b, Ref):
        return float(b), "threshold"
    if b.baseline is not None:
        if cond.reduce is not None:  # a reduced comparison has one node-wide baseline: reduce(signal)
            found = ctx.baseline(f"{cond.reduce}({cond.signal})", "")
        else:
            found = ctx.baseline(cond.signal, entity)
        return None if found is None else (found[0] * b.baseline, found[1])
    if b.peers is not None:
        median = peer_median(ctx.values.get(cond.signal), entity)
        return None if median is None else (median * b.peers, "peers")
    other = value_of(ctx, b.signal or "", b.reduce, entity, scope)
    return None if other is None else (other * b.times, "signal")


def peer_median(values: dict[str, float] | None, entity: str) -> float | None:
    """The median of `values` over the entities other than `entity` (its peers on the node); None when
    fewer than :data:`MIN_PEERS` peers report."""
    if not values:
        return None
    others = [v for e, v in values.items() if e != entity]
    return statistics.median(others) if len(others) >= MIN_PEERS else None


def peer_count(values: dict[str, float] | None, entity: str) -> int:
    return sum(1 for e in (values or {}) if e != entity)


def rising(points: list[tuple[float, float]], window_s: float, now: float) -> bool | None:
    """The series rose over the window: it spans the window, ends higher than it started and its
    least-squares slope is positive (None while there is not enough history)."""
    pts = sorted((t, v) for t, v in points if t >= now - window_s - 1e-9)
    if len(pts) < 3 or pts[-1][0] - pts[0][0] < window_s * 0.8:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    num = sum((t - mt) * (v - mv) for t, v in pts)
    return num > 0 and pts[-1][1] > pts[0][1]


def holds(cond: object, ctx: EvalContext, entity: str, scope: str) -> bool | None:
    if isinstance(cond, SignalCondition) and cond.crossed is not None:
        crossed = ctx.crossings(cond, entity, scope)
        return None if crossed is None else crossed >= cond.crossed.times
    if isinstance(cond, SignalCondition):
        v = value_of(ctx, cond.signal, cond.reduce, entity, scope)
        if v is None:
            return None
        if cond.min_observations is not None:
            base = cond.signal.rpartition(".")[0]
            n = value_of(ctx, f"{base}.window_count", cond.reduce, entity, scope)
            if n is None or n < cond.min_observations:
                return None
        verdict = True
        if cond.op is not None:
            limit = limit_of(ctx, cond, entity, scope)
            if limit is None:
                return None
            verdict = cond.compare(v, limit[0])
        if verdict and cond.growing_for is not None:
            trend = rising(ctx.history(cond.signal, entity), cond.growing_for, ctx.now)
            return trend
        return verdict
    if isinstance(cond, Absent):
        seen = ctx.last_seen.get(cond.absent) or {}
        last = seen.get("" if not ctx.per(cond.absent) else entity)
        if last is None:
            return None  # never seen: nothing went missing
        return ctx.now - last >= cond.for_
    if isinstance(cond, AllOf):
        results = [holds(c, ctx, entity, scope) for c in cond.all]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if isinstance(cond, AnyOf):
        # True if a branch holds; False once one branch is judged false and none holds, even when other
        # branches lack their signals (an alternative that a source never reports must not keep the rule
        # from ever ending); None only when no branch can be judged
        results = [holds(c, ctx, entity, scope) for c in cond.any]
        if any(r is True for r in results):
            return True
        return False if any(r is False for r in results) else None
    if isinstance(cond, NotOf):
        r = holds(cond.not_, ctx, entity, scope)
        return None if r is None else not r
    raise TypeError(f"unknown condition {cond!r}")


def entities_of(leaves: Iterable[object], ctx: EvalContext, scope: str) -> list[str]:
    """The entities a rule can judge now: those its per-scope signals report (else the node itself)."""
    found: set[str] = set()
    for leaf in leaves:
        if isinstance(leaf, SignalCondition) and leaf.reduce is None and ctx.per(leaf.signal) == (scope,):
            found.update((ctx.values.get(leaf.signal) or {}).keys())
        elif isinstance(leaf, Absent) and ctx.per(leaf.absent) == (scope,):
            found.update((ctx.last_seen.get(leaf.absent) or {}).keys())
    if not found and scope == "node":
        found.add("")
    if not found and not any(
        isinstance(leaf, SignalCondition) and leaf.reduce is None and ctx.per(leaf.signal) for leaf in leaves
    ):
        found.add("")
    return sorted(found, key=lambda e: (int(e), "") if e.isdigit() else (1 << 30, e))


def observations(
    leaves: Iterable[SignalCondition | Absent],
    ctx: EvalContext,
    entity: str,
    scope: str,
    held_s: float,
    labels: dict[str, str],
) -> list[Evidence]:
    """Evidence for the leaves that have a value now: value vs threshold / baseline / other signal."""
    out = []
    for leaf in leaves:
        if isinstance(leaf, Absent):
            seen = (ctx.last_seen.get(leaf.absent) or {}).get("" if not ctx.per(leaf.absent) else entity)
            if seen is not None:
                out.append(
                    Evidence(
                        signal=leaf.absent,
                        value=round(ctx.now - seen, 3),
                        op="absent for",
                        threshold=leaf.for_,
                        unit="s",
                        labels=labels,
                    )
                )
            continue
        if leaf.crossed is not None:
            out.extend(_crossing_evidence(leaf, ctx, entity, scope, labels))
            continue
        v = value_of(ctx, leaf.signal, leaf.reduce, entity, scope)
        if v is None:
            continue
        limit = limit_of(ctx, leaf, entity, scope)
        spec = ctx.catalog.spec(leaf.signal) or ctx.catalog.spec(leaf.signal.rpartition(".")[0])
        name = f"{leaf.reduce.value}({leaf.signal})" if leaf.reduce else leaf.signal
        threshold = baseline = None
        detail = ""
        if limit is not None:
            if limit[1] == "peers":
                baseline = round(limit[0] / (leaf.bound.peers or 1), 6)  # type: ignore[union-attr]
                threshold = round(limit[0], 6)
                n = peer_count(ctx.values.get(leaf.signal), entity)
                detail = f"{v / baseline:.2f}x the median of its {n} peers" if baseline else ""
            elif limit[1] in ("rolling", "load-model"):
                baseline = round(limit[0] / (leaf.bound.baseline or 1), 6)  # type: ignore[union-attr]
                threshold = round(limit[0], 6)
                detail = f"{v / baseline:.1f}x the {limit[1]} baseline" if baseline else ""
            else:
                threshold = round(limit[0], 6)
                if limit[1] == "signal":
                    detail = f"vs {leaf.bound.describe()}"  # type: ignore[union-attr]
        elif leaf.growing_for is not None:
            detail = f"rising for {leaf.growing_for:g} s"
        out.append(
            Evidence(
                signal=name,
                value=round(v, 6),
                op=leaf.symbol,
                threshold=threshold,
                baseline=baseline,
                unit=spec.unit if spec else "",
                window_s=held_s,
                labels=labels,
                detail=detail,
            )
        )
    return out


def _crossing_evidence(
    leaf: SignalCondition, ctx: EvalContext, entity: str, scope: str, labels: dict[str, str]
) -> list[Evidence]:
    """A transition counter's evidence: how many changes of the comparison in its window."""
    n = ctx.crossings(leaf, entity, scope)
    if n is None or leaf.crossed is None:
        return []
    name = f"{leaf.reduce.value}({leaf.signal})" if leaf.reduce else leaf.signal
    b = leaf.bound
    rhs = b.describe() if isinstance(b, Ref) else f"{b:g}"
    return [
        Evidence(
            signal=name,
            value=float(n),
            op="changes >=",
            threshold=float(leaf.crossed.times),
            unit="",
            window_s=leaf.crossed.within,
            labels=labels,
            detail=f"`{name} {leaf.symbol} {rhs}` turned true or false {n} times in {leaf.crossed.within:g} s",
        )
    ]


#: One leaf counts as at most this strong (a rate `above: 0`, a baseline bound close to 1x: a small absolute
#: change reads as a huge multiple).
LEAF_STRENGTH_CAP = 4.0


def _leaf_strength(cond: SignalCondition, ctx: EvalContext, entity: str, scope: str) -> float:
    """How far one holding leaf is past its bound (1.0: at the bound). Against a baseline or the peers, in units
    of the bound's own distance from normal: a value at 3x its baseline against `above_baseline: 2` is 2.0, a
    clock at half its peers' against `below: {peers: 0.8}` is 2.5, while a bound that does not point away from
    normal (a guard such as `at_least: {baseline: 0.7}`) is no evidence of strength (1.0). Against a constant or
    another signal, the multiple of the bound (a queue wait of 0.6 s against `above: 0.2` is 3.0, an SM clock at
    0.5 of its max against `below: 0.8` is 1.6)."""
    v = value_of(ctx, cond.signal, cond.reduce, entity, scope)
    limit = limit_of(ctx, cond, entity, scope)
    if v is None or limit is None or limit[0] <= 0:
        return 1.0  # (`above: 0`: whether, not how far)
    up = cond.op in ("above", "at_least")
    b = cond.bound
    factor = (b.baseline if b.baseline is not None else b.peers) if isinstance(b, Ref) else None
    if factor is None:  # a constant or another signal
        out = v / limit[0] if up else (limit[0] / v if v > 0 else 1.0)  # (`below: 1` of a 0/1 flag: whether)
    else:
        ratio = v / (limit[0] / factor)  # the value over its normal (baseline or peer median)
        if up and factor > 1.0:
            out = (ratio - 1.0) / (factor - 1.0)
        elif not up and factor < 1.0:
            out = (1.0 - ratio) / (1.0 - factor)
        else:
            out = 1.0
    return min(max(out, 1.0), LEAF_STRENGTH_CAP)


def strength(cond: object, ctx: EvalContext, entity: str, scope: str) -> float:
    """The strength of the evidence of a condition that holds (>= 1.0; 1.0: just at its bounds): the product
    over `all` (independent deviations add up, as log-likelihood ratios do), the strongest holding branch of
    `any`, 1.0 for `not`, absences and trends (they say whether, not how far)."""
    if isinstance(cond, SignalCondition):
        return _leaf_strength(cond, ctx, entity, scope) if cond.op is not None else 1.0
    if isinstance(cond, AllOf):
        out = 1.0
        for c in cond.all:
            out *= strength(c, ctx, entity, scope)
        return out
    if isinstance(cond, AnyOf):
        return max((strength(c, ctx, entity, scope) for c in cond.any if holds(c, ctx, entity, scope)), default=1.0)
    return 1.0


#: How steeply the hold shortens with the evidence: a condition `strength` times as far past its bounds holds
#: for ``for / strength ** HOLD_POWER`` (twice as far: a quarter of `for`), never less than `min_for`.
HOLD_POWER = 2.0


def required_hold(
    cond: object, ctx: EvalContext, entity: str, scope: str, for_s: float, min_for_s: float | None, held_s: float
) -> float:
    """How long `cond` must have held for `entity` before its rule fires, judged now: `for_s` for evidence just
    past its bounds (and for a rule without `min_for`), less the stronger it is, never below `min_for_s`."""
    if min_for_s is None or min_for_s >= for_s or held_s < min_for_s:
        return for_s  # (not yet the shortest hold: whatever the strength, it cannot fire now)
    return max(min_for_s, for_s / strength(cond, ctx, entity, scope) ** HOLD_POWER)
