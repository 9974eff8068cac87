"""What one node currently reports, across all its sources: the values rules are judged on.

A node's snapshots arrive one source at a time (dcgm, then vllm, then node ...). Rules that combine
sources ("TPOT P95 over 2x baseline AND DRAM bandwidth over 85%") need the latest value of every signal,
so :class:`LatestValues` keeps them with their event time and drops what is older than a few collection
intervals. It lives in the worker's memory only: every value is refreshed within one interval, so it is
not worth a changelog (after a restart rules see "no news" for one interval, never wrong values).

:func:`counter_rates` turns counter deltas into per-second ``<signal>.rate`` values; derived ratios
(``gpu.sm_clock_ratio``) are computed on the merged view, so their two inputs may come from different
snapshots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tailhound.catalog import Catalog
from tailhound.snapshot import Snapshot
from tailhound.wire.decoded import DecodedSnapshot

from .extract import DERIVED_SIGNALS, RATE_RATIOS, SignalValues, add_flags_and_ratios, add_ratio
from .layout_scan import LayoutPlan, plan_of

#: A value is current for this many collection intervals (at least MIN_AGE_S).
STALE_INTERVALS = 3.0
MIN_AGE_S = 60.0
DEFAULT_AGE_S = 120.0


def counter_rates(snapshot: Snapshot, catalog: Catalog) -> SignalValues:
    """``<counter signal>.rate`` per entity: the snapshot's deltas over (prev_ts, ts], summed over the
    labels that are not the entity's (vLLM's finished_reason, ...)."""
    if snapshot.prev_ts is None or snapshot.ts <= snapshot.prev_ts:
        return {}
    span = snapshot.ts - snapshot.prev_ts
    out: SignalValues = {}
    for s in snapshot.samples:
        if s.kind != "counter" or s.delta is None:
            continue
        found = catalog.lookup(snapshot.source, s.name, s.labels)
        if found is None or found[0].kind != "counter":
            continue
        spec, scale = found
        entity = spec.entity(s.labels, snapshot.labels)
        if entity is None:
            continue
        per_entity = out.setdefault(f"{spec.name}.rate", {})
        per_entity[entity] = per_entity.get(entity, 0.0) + s.delta * scale / span
    return out


class LatestValues:
    """signal -> entity -> (value, ts, max_age) for one node."""

    def __init__(self) -> None:
        self._values: dict[str, dict[str, tuple[float, float, float]]] = {}
        #: (ts, interval_s) of the last snapshot whose window statistics were stored (see SnapshotProcessor)
        self.stats_at: tuple[float, float | None] | None = None

    def update(self, values: SignalValues, ts: float, interval_s: float | None) -> None:
        max_age = max(STALE_INTERVALS * interval_s, MIN_AGE_S) if interval_s else DEFAULT_AGE_S
        stored = self._values
        for signal, per_entity in values.items():
            slot = stored.get(signal)
            if slot is None:
                stored[signal] = {entity: (value, ts, max_age) for entity, value in per_entity.items()}
                continue
            for entity, value in per_entity.items():
                old = slot.get(entity)
                if old is None or old[1] <= ts:
                    slot[entity] = (value, ts, max_age)

    def view(self, now: float) -> SignalValues:
        """Current values (not older than their max age), plus ratios derived from them."""
        out: SignalValues = {}
        for signal, per_entity in self._values.items():
            current = {e: v for e, (v, ts, age) in per_entity.items() if now - ts <= age}
            if current:
                out[signal] = current
        for name, (_per, (num, den)) in DERIVED_SIGNALS.items():
            add_ratio(out, name, num, den)
        for name, (num, den) in RATE_RATIOS.items():
            add_ratio(out, name, num, den)
        return out

    def current(self, now: float) -> CurrentValues:
        """:meth:`view`, computed per signal when it is first read (a step reads a few dozen signals of
        the few hundred values a node has)."""
        return CurrentValues(self, now)

    def current_of(self, signal: str, now: float) -> dict[str, float] | None:
        """The current values of one stored signal (None when none is current)."""
        per_entity = self._values.get(signal)
        if not per_entity:
            return None
        current = {e: v for e, (v, ts, age) in per_entity.items() if now - ts <= age}
        return current or None

    def last_seen(self) -> dict[str, dict[str, float]]:
        return {s: {e: ts for e, (_v, ts, _a) in per.items()} for s, per in self._values.items()}

    def seen(self) -> SeenTimes:
        """:meth:`last_seen`, per signal when it is read."""
        return SeenTimes(self._values)

    def forget_older_than(self, cutoff: float) -> None:
        """Drop values last seen before `cutoff` (bounded memory for entities that went away)."""
        for signal in list(self._values):
            per = {e: t for e, t in self._values[signal].items() if t[1] >= cutoff}
            if per:
                self._values[signal] = per
            else:
                del self._values[signal]

    def __len__(self) -> int:
        return sum(len(p) for p in self._values.values())


#: derived signal -> its (numerator, denominator), in the order view() computes them (a later one wins)
_RATIOS: dict[str, tuple[str, str]] = {**{name: pair for name, (_per, pair) in DERIVED_SIGNALS.items()}, **RATE_RATIOS}
_MISSING = object()


class CurrentValues:
    """A node's :meth:`LatestValues.view` at one event time, computed per signal on first read.

    Reads as the dict view() returns (``get``, ``[]``, ``in``, iteration); a signal set with ``[]``
    replaces what it would have been, as an assignment into that dict does, and so does a non-empty
    answer of a function given with :meth:`provide` (computed when the signal is first read).
    """

    __slots__ = ("_latest", "_now", "_known", "_provided")

    def __init__(self, latest: LatestValues, now: float) -> None:
        self._latest = latest
        self._now = now
        self._known: dict[str, dict[str, float] | None] = {}
        self._provided: dict[str, Callable[[], dict[str, float] | None]] = {}

    def provide(self, signal: str, compute: Callable[[], dict[str, float] | None]) -> None:
        """`signal` is what `compute` returns, when that is not empty (asked on the first read)."""
        self._provided[signal] = compute
        self._known.pop(signal, None)

    def get(self, signal: str, default: object = None):  # as dict.get
        found = self._known.get(signal, _MISSING)
        if found is _MISSING:
            found = self._known[signal] = self._compute(signal)
        return default if found is None else found

    def _compute(self, signal: str) -> dict[str, float] | None:
        provided = self._provided.get(signal)
        if provided is not None:
            values = provided()
            if values:
                return values
        pair = _RATIOS.get(signal)
        if pair is not None:
            nums, dens = self.get(pair[0]), self.get(pair[1])
            if nums and dens:
                ratios = {e: nums[e] / dens[e] for e in nums if dens.get(e)}
                if ratios:
                    return ratios
        return self._latest.current_of(signal, self._now)

    def __getitem__(self, signal: str) -> dict[str, float]:
        found = self.get(signal)
        if found is None:
            raise KeyError(signal)
        return found

    def __setitem__(self, signal: str, values: dict[str, float]) -> None:
        self._known[signal] = values

    def __contains__(self, signal: object) -> bool:
        return isinstance(signal, str) and self.get(signal) is not None

    def to_dict(self) -> SignalValues:
        """Every signal with a current value (what view() gives, plus what was set)."""
        names = [*self._latest._values, *_RATIOS, *self._provided, *self._known]
        return {name: values for name in dict.fromkeys(names) if (values := self.get(name)) is not None}

    def __iter__(self):
        return iter(self.to_dict())

    def keys(self):
        return self.to_dict().keys()

    def items(self):
        return self.to_dict().items()


class SeenTimes:
    """:meth:`LatestValues.last_seen` read one signal at a time: ``get(signal)`` -> {entity: ts}."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, dict[str, tuple[float, float, float]]]) -> None:
        self._values = values

    def get(self, signal: str, default: object = None):  # as dict.get
        per = self._values.get(signal)
        if per is None:
            return default
        return {e: ts for e, (_v, ts, _a) in per.items()}


class SnapshotScan(NamedTuple):
    """What one pass over a snapshot's samples finds."""

    #: ``extract(snapshot)`` updated with ``counter_rates(snapshot)``
    values: SignalValues
    #: some histogram sample carries a delta (what the latency windows take)
    histogram_deltas: bool
    #: (model, engine) of the samples that name a model, in sample order (repeats of the previous one left out)
    models: list[tuple[str, str | None]]


_SKIP = object()  # the metric maps to no signal of the sample's kind
#: plans by label values kept per metric whose mapping depends on them (beyond: a catalog lookup per sample)
MAX_LABEL_PLANS = 1024


class _ByLabels:
    """The plan of a metric whose mapping depends on label values (catalog ``match``, e.g. dcgm's MIG
    ``GPU_I_ID``): one plan per combination of the values of the labels the mappings match on."""

    __slots__ = ("keys", "plans")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.plans: dict[tuple, object] = {}


def _resolved_plan(found: tuple | None, kind: str) -> object:
    """(signal, scale, entity label, spec) of a catalog answer, where the entity label is "" for node-level
    signals and None when SignalSpec.entity must join several; _SKIP when it is not of the sample's kind."""
    if found is None or found[0].kind != kind:
        return _SKIP
    spec, scale = found
    per = spec.per
    label = "" if not per or per == ("node",) else (per[0] if len(per) == 1 else None)
    return (spec.name if kind == "gauge" else f"{spec.name}.rate", scale, label, spec)


def _sample_plan(catalog: Catalog, source: str, kind: str, metric: str) -> object:
    """How a (source, kind, metric) sample becomes a value: a plan (:func:`_resolved_plan`), or a
    :class:`_ByLabels` when the mapping depends on label values."""
    mappings = catalog.by_metric.get((source, metric), ())
    if any(sm.match for _, sm in mappings):
        return _ByLabels(tuple(sorted({k for _, sm in mappings for k, _ in sm.match})))
    return _resolved_plan(catalog.lookup(source, metric), kind)


def _label_plan(
    plan: _ByLabels, catalog: Catalog, source: str, kind: str, metric: str, labels: dict[str, str]
) -> object:
    """The plan of one sample of a :class:`_ByLabels` metric (what the catalog maps its label values to)."""
    values = tuple(map(labels.get, plan.keys))
    found = plan.plans.get(values)
    if found is None:
        found = _resolved_plan(catalog.lookup(source, metric, labels), kind)
        if len(plan.plans) < MAX_LABEL_PLANS:
            plan.plans[values] = found
    return found


def snapshot_values(snapshot: Snapshot, catalog: Catalog) -> SnapshotScan:
    """``extract(snapshot)`` updated with ``counter_rates(snapshot)``, in one pass over the samples with
    a plan per (source, kind, metric) kept with the catalog (a dcgm snapshot has 168 samples); a version-3
    snapshot whose layout was seen before reads its values by the layout's plan (:mod:`.layout_scan`)."""
    if snapshot.__class__ is DecodedSnapshot:
        plan = plan_of(snapshot, catalog, lambda snap: _build_plan(snap, catalog))  # type: ignore[arg-type]
        if plan is not None:
            return _scan_planned(snapshot, plan)
    return _scan(snapshot, catalog)


def _scan(snapshot: Snapshot, catalog: Catalog) -> SnapshotScan:
    gauges: SignalValues = {}
    rates: SignalValues = {}
    span = snapshot.ts - snapshot.prev_ts if snapshot.prev_ts is not None and snapshot.ts > snapshot.prev_ts else None
    source, common = snapshot.source, snapshot.labels
    common_model, common_instance = common.get("model_name"), common.get("instance")
    plans = {kind: catalog.memo.setdefault(("sample-plans", source, kind), {}) for kind in ("gauge", "counter")}
    histogram_deltas = False
    models: list[tuple[str, str | None]] = []
    for s in snapshot.samples:
        labels = s.labels
        model = labels.get("model_name") or common_model
        if model:
            pair = (model, labels.get("engine") or common_instance)
            if not models or models[-1] != pair:
                models.append(pair)
        kind = s.kind
        if kind == "histogram":
            histogram_deltas = histogram_deltas or s.delta is not None
            continue
        if kind == "counter" and (span is None or s.delta is None):
            continue
        kind_plans = plans[kind]
        plan = kind_plans.get(s.name)
        if plan is None:
            plan = _sample_plan(catalog, source, kind, s.name)
            if len(kind_plans) < 65536:  # bounded: metric names come from the wire
                kind_plans[s.name] = plan
        if plan.__class__ is _ByLabels:
            plan = _label_plan(plan, catalog, source, kind, s.name, labels)  # type: ignore[arg-type]
        if plan is _SKIP:
            continue
        name, scale, label, spec = plan  # type: ignore[misc]
        if label is None:
            entity = spec.entity(labels, common)
            if entity is None:
                continue
        elif label:
            entity = labels.get(label, common.get(label))
            if entity is None:
                entity = labels.get("instance", common.get("instance"))
                if entity is None:
                    continue
        else:
            entity = ""
        if kind == "gauge":
            gauges.setdefault(name, {})[entity] = s.value * scale
        else:
            per_entity = rates.setdefault(name, {})
            per_entity[entity] = per_entity.get(entity, 0.0) + s.delta * scale / span  # type: ignore[operator]
    add_flags_and_ratios(gauges)
    gauges.update(rates)
    return SnapshotScan(gauges, histogram_deltas, models)


def _build_plan(snapshot: Snapshot, catalog: Catalog) -> tuple:
    """The parts of a :class:`~.layout_scan.LayoutPlan` of `snapshot`'s layout: :func:`_scan`'s resolution of
    every sample, without its values."""
    source, common = snapshot.source, snapshot.labels
    common_model, common_instance = common.get("model_name"), common.get("instance")
    plans = {kind: catalog.memo.setdefault(("sample-plans", source, kind), {}) for kind in ("gauge", "counter")}
    gauges: dict[str, list] = {}
    counters: list = []
    histograms: list = []
    models: list[tuple[str, str | None]] = []
    for i, s in enumerate(snapshot.samples):
        labels = s.labels
        model = labels.get("model_name") or common_model
        if model:
            pair = (model, labels.get("engine") or common_instance)
            if not models or models[-1] != pair:
                models.append(pair)
        kind = s.kind
        if kind == "histogram":
            histograms.append(i)
            continue
        plan = plans[kind].get(s.name) or _sample_plan(catalog, source, kind, s.name)
        if plan.__class__ is _ByLabels:
            plan = _label_plan(plan, catalog, source, kind, s.name, labels)  # type: ignore[arg-type]
        if plan is _SKIP:
            continue
        name, scale, label, spec = plan  # type: ignore[misc]
        if label is None:
            entity = spec.entity(labels, common)
        elif label:
            entity = labels.get(label, common.get(label))
            if entity is None:
                entity = labels.get("instance", common.get("instance"))
        else:
            entity = ""
        if entity is None:
            continue
        if kind == "gauge":
            gauges.setdefault(name, []).append((i, entity, scale))
        else:
            counters.append((i, name, entity, scale))
    return list(gauges.items()), counters, histograms, models


def _scan_planned(snapshot: Snapshot, plan: LayoutPlan) -> SnapshotScan:
    """:func:`_scan` of a snapshot of a planned layout: the same values, in the same order."""
    samples = snapshot.samples
    gauges: SignalValues = {}
    for name, members in plan.gauges:
        gauges[name] = {entity: samples[i].value * scale for i, entity, scale in members}
    rates: SignalValues = {}
    if plan.counters and snapshot.prev_ts is not None and snapshot.ts > snapshot.prev_ts:
        span = snapshot.ts - snapshot.prev_ts
        for i, name, entity, scale in plan.counters:
            delta = samples[i].delta
            if delta is None:
                continue
            per_entity = rates.setdefault(name, {})
            per_entity[entity] = per_entity.get(entity, 0.0) + delta * scale / span  # type: ignore[operator]
    add_flags_and_ratios(gauges)
    gauges.update(rates)
    deltas = any(samples[i].delta is not None for i in plan.histograms)
    return SnapshotScan(gauges, deltas, list(plan.models))
