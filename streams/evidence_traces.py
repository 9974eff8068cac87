"""The recent history of an incident's evidence, for its charts (pure).

While a rule's condition holds for an entity the rules stage hands each step's evidence to :func:`record`, which
appends it to the node's :class:`SeriesTrace` of that rule and signal (kept in node state, so it survives a
restart): the entity's value, its baseline and its peers' values at the same moment. Bounded: at most
:data:`MAX_TRACES` traces per node and the incident model's entity and point caps, the older half thinned when
full so a trace spans the whole incident. The correlation stage attaches traces to events (:func:`export`) and
drops those nothing needs (:func:`prune`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, Field

from tailhound.incident import MAX_SERIES, MAX_SERIES_ENTITIES, MAX_SERIES_POINTS, Evidence, EvidenceSeries

from .ruleset.condition_eval import EvalContext

#: traces one node keeps at most (rules x signals of its pending and firing rules)
MAX_TRACES = 32
#: evidence signals recorded per rule at most (its leaves first, then its context)
MAX_SIGNALS_PER_RULE = 6
_CONTEXT_OP = "="


class SeriesTrace(BaseModel):
    """One rule's signal over time on one node: the wire :class:`EvidenceSeries` while it is recorded."""

    rule: str
    signal: str
    unit: str = ""
    op: str = ""
    threshold: float | None = None
    for_s: float = 0.0
    per: str = ""
    focus: list[str] = Field(default_factory=list)
    pending_since: float | None = None
    baseline_of: str = ""
    ts: list[float] = Field(default_factory=list)
    values: dict[str, list[float | None]] = Field(default_factory=dict)
    baseline: dict[str, list[float | None]] = Field(default_factory=dict)


def _raw_signal(name: str) -> str:
    """``max(gpu.temperature)`` -> ``gpu.temperature``."""
    return name[name.index("(") + 1 : -1] if name.endswith(")") and "(" in name else name


def _charted(evidence: list[Evidence]) -> list[Evidence]:
    """The observations worth a chart: comparisons first, then context values that are plain numbers."""
    leaves = [ev for ev in evidence if ev.op not in (_CONTEXT_OP, "absent for")]
    context = [ev for ev in evidence if ev.op == _CONTEXT_OP and not ev.detail]
    seen: set[str] = set()
    out = []
    for ev in leaves + context:
        if ev.signal not in seen:
            seen.add(ev.signal)
            out.append(ev)
    return out[:MAX_SIGNALS_PER_RULE]


def record(
    traces: dict[str, SeriesTrace],
    rule: str,
    for_s: float,
    scope: str,
    entity: str,
    since: float,
    evidence: list[Evidence],
    ctx: EvalContext,
) -> None:
    """Add `entity`'s `evidence` of `rule` at ``ctx.now`` to the node's traces (its condition holds since
    `since`)."""
    ts = ctx.now
    for ev in _charted(evidence):
        key = f"{rule}|{ev.signal}"
        trace = traces.get(key)
        if trace is None:
            if len(traces) >= MAX_TRACES:
                continue
            raw = _raw_signal(ev.signal)
            per = ctx.per(raw) if raw == ev.signal else ()
            trace = traces[key] = SeriesTrace(
                rule=rule,
                signal=ev.signal,
                unit=ev.unit,
                op=ev.op,
                for_s=for_s,
                per=per[0] if len(per) == 1 and per[0] == scope else "",
            )
        _add_point(trace, entity, since, ev, ctx, ts)


def _add_point(trace: SeriesTrace, entity: str, since: float, ev: Evidence, ctx: EvalContext, ts: float) -> None:
    if trace.ts and ts < trace.ts[-1]:
        return  # an older source's snapshot: the chart runs forwards
    if not trace.ts or ts > trace.ts[-1]:
        trace.ts.append(ts)
        for series in (trace.values, trace.baseline):
            for points in series.values():
                points.append(None)
        if trace.per:  # every entity at this moment: a recovered GPU of the incident goes on as a peer does
            for peer, value in (ctx.values.get(trace.signal) or {}).items():
                _set(trace, trace.values, peer, value)
    if ev.op != _CONTEXT_OP:
        trace.threshold = ev.threshold
        trace.op = ev.op
    if entity not in trace.focus:
        trace.focus.append(entity)
        trace.values = {
            e: trace.values[e]
            for e in trace.focus + [e for e in trace.values if e not in trace.focus]
            if e in trace.values
        }
    if trace.pending_since is None or since < trace.pending_since:
        trace.pending_since = since
    _set(trace, trace.values, entity, ev.value)
    if ev.baseline is not None:
        _set(trace, trace.baseline, entity, ev.baseline)
        trace.baseline_of = _baseline_of(ev.detail) or trace.baseline_of
    if len(trace.ts) > MAX_SERIES_POINTS:
        _thin(trace)


def _set(trace: SeriesTrace, series: dict[str, list[float | None]], entity: str, value: float) -> None:
    points = series.get(entity)
    if points is None:
        if series is trace.values and len(series) >= MAX_SERIES_ENTITIES:
            return
        points = series[entity] = [None] * len(trace.ts)
    points[-1] = _round(value)


def _baseline_of(detail: str) -> str:
    """What an observation's baseline is, from its reading (tailhound.streams.ruleset.condition_eval.observations)."""
    if "median of its" in detail:
        return "peers"
    for kind in ("load-model", "rolling"):
        if f"{kind} baseline" in detail:
            return kind
    return ""


def _thin(trace: SeriesTrace) -> None:
    """Drop every other point of the older half."""
    n = len(trace.ts)
    half = n // 2
    keep = list(range(0, half, 2)) + list(range(half, n))
    trace.ts = [trace.ts[i] for i in keep]
    for series in (trace.values, trace.baseline):
        for entity, points in series.items():
            series[entity] = [points[i] for i in keep]


def _round(v: float | None) -> float | None:
    """4 significant digits (a chart needs no more); a value that is not finite is no value."""
    return None if v is None or not math.isfinite(v) else float(f"{v:.4g}")


def export(trace: SeriesTrace, node: str) -> EvidenceSeries:
    """The wire form; a node-level value is named after the node (so a fleet incident can set nodes side by
    side)."""

    def named(e: str) -> str:
        return e or node

    return EvidenceSeries(
        rule=trace.rule,
        signal=trace.signal,
        unit=trace.unit,
        op=trace.op,
        threshold=trace.threshold,
        for_s=trace.for_s,
        per=trace.per,
        focus=[named(e) for e in trace.focus],
        ts=[round(t, 3) for t in trace.ts],
        pending_since=trace.pending_since,
        baseline_of=trace.baseline_of,
        values={named(e): [_round(v) for v in pts] for e, pts in trace.values.items()},
        baseline={named(e): [_round(v) for v in pts] for e, pts in trace.baseline.items()},
    )


def series_of(traces: dict[str, SeriesTrace], rules: Iterable[str], node: str) -> list[EvidenceSeries]:
    """The series of `rules` (in that order: the root rule first), at most :data:`MAX_SERIES`."""
    out: list[EvidenceSeries] = []
    for rule in rules:
        for trace in traces.values():
            if trace.rule == rule and trace.ts:
                out.append(export(trace, node))
                if len(out) >= MAX_SERIES:
                    return out
    return out


def prune(traces: dict[str, SeriesTrace], needed: set[str]) -> None:
    """Forget the traces of rules not in `needed` (no entity pending or firing, no open incident)."""
    for key in [k for k, t in traces.items() if t.rule not in needed]:
        del traces[key]
