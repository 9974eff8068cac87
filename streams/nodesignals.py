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

from tailhound.catalog import Catalog
from tailhound.snapshot import Snapshot

from .signals import DERIVED_SIGNALS, SignalValues, add_ratio

#: A value is current for this many collection intervals (at least MIN_AGE_S).
STALE_INTERVALS = 3.0
MIN_AGE_S = 60.0
DEFAULT_AGE_S = 120.0

#: Ratios of two counter rates (numerator, denominator), computed on the merged view.
RATE_RATIOS: dict[str, tuple[str, str]] = {
    "net.tcp_retrans_ratio": ("net.tcp_retrans_segs.rate", "net.tcp_out_segs.rate"),
    "engine.prefix_cache_hit_ratio": ("engine.prefix_cache_hits.rate", "engine.prefix_cache_queries.rate"),
    "net.connect_failure_rate_ratio": ("net.connect_failures.rate", "net.connect_attempts.rate"),
    "engine.http_rejection_ratio": ("engine.http_rejections.rate", "engine.http_requests.rate"),
}


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

    def update(self, values: SignalValues, ts: float, interval_s: float | None) -> None:
        max_age = max(STALE_INTERVALS * interval_s, MIN_AGE_S) if interval_s else DEFAULT_AGE_S
        for signal, per_entity in values.items():
            slot = self._values.setdefault(signal, {})
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

    def last_seen(self) -> dict[str, dict[str, float]]:
        return {s: {e: ts for e, (_v, ts, _a) in per.items()} for s, per in self._values.items()}

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
