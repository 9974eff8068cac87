"""Signals: the snapshot's samples -> canonical values per entity (the catalog's mappings, counter rates,
histogram deltas into the node's latency windows and their percentiles), merged into the node's latest
view (:mod:`tailhound.streams.latest_values`), and the per-model service levels (``sla.ttft_p99``)."""

from __future__ import annotations

import fnmatch

from tailhound.catalog import Catalog
from tailhound.snapshot import Snapshot

from ..extract import SLA_SIGNALS, SignalValues
from ..latest_values import CurrentValues
from ..node_state import NodeState
from ..ruleset.rule_reads import window_stats_read
from ..snapshot_scan import snapshot_values
from .step import Step


def stage(step: Step) -> bool:
    state, snapshot = step.state, step.snapshot
    scan = snapshot_values(snapshot, step.catalog)
    fresh = scan.values
    if scan.histogram_deltas:
        wanted = None if step.all_stats else window_stats_read(step.rules, step.load_models or ())
        latency = _latency_values(state, snapshot, step.catalog, wanted)
        if latency is not None:
            fresh.update(latency)
            step.latest.stats_at = (snapshot.ts, snapshot.interval_s)
    step.latest.update(fresh, snapshot.ts, snapshot.interval_s)
    _remember_models(state, scan.models)
    step.fresh = fresh
    step.view = step.latest.current(snapshot.ts)  # computed per signal as rules read it
    _add_sla(step.view, state, step.sla)
    return True


def _remember_models(state: NodeState, models: list[tuple[str, str | None]]) -> None:
    """The models of a snapshot's samples (sample label, else the snapshot's), and engine -> model."""
    for model, engine in models:
        if model not in state.model_names:
            state.model_names = sorted([*state.model_names, model])[:8]
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
    """``sla.ttft_p99`` per engine from the engine's model (settings.streams.ttft_p99_sla_s), and the
    ``capacity.*`` thresholds of the capacity file (keyed by signal in `sla`); computed when a rule first
    reads them (nothing they depend on changes later in the step). A limit no setting gives is absent."""
    given = sla or DEFAULT_SLA
    for signal, field in SLA_SIGNALS.items():
        patterns = given.get(signal) or given.get(field) or DEFAULT_SLA.get(field)
        if not patterns:
            continue

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


def _latency_values(
    state: NodeState, snapshot: Snapshot, catalog: Catalog, wanted: frozenset[str] | None
) -> SignalValues | None:
    """Feed histogram deltas into the node's latency windows; their percentiles per engine (the `wanted`
    ones, None: all); None when no window took an interval."""
    tracker = state.tracker(catalog)
    if not tracker.observe(snapshot):
        return None
    state._dirty.add("latency")
    return tracker.engine_values(snapshot.ts, snapshot.node, wanted)
