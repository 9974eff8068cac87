"""One pass over a snapshot's samples: the signal values it brings, the rates of its counters, whether it carries
histogram deltas and which models it names (what :class:`~tailhound.streams.latest_values.LatestValues` takes).

:func:`snapshot_values` resolves each (source, kind, metric) once, with a plan kept with the catalog; a version-3
snapshot whose layout was seen before reads its values by the layout's plan (:mod:`.layout_scan`).
:func:`counter_rates` turns counter deltas into per-second ``<signal>.rate`` values.
"""

from __future__ import annotations

from typing import NamedTuple

from tailhound.catalog import Catalog
from tailhound.snapshot import Snapshot
from tailhound.wire.decoded import DecodedSnapshot

from .extract import SignalValues, add_flags_and_ratios
from .layout_scan import LayoutPlan, plan_of


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
