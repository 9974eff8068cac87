"""Canonical signal values from one snapshot (pure), and the table of signals derived from them.

``extract(snapshot)`` returns ``{signal: {entity: value}}`` (entity: the value of the catalog's ``per`` label,
``""`` for node-level signals), translated and scaled through :mod:`tailhound.catalog`, then the derived
ratios and flags. MIG instance lines never land in a whole-GPU value: the catalog sends device-wide fields to
the GPU and per-instance fields to the ``mig.*`` twins (entity ``"0/mig3"``), so per-GPU rules see whole GPUs.
"""

from __future__ import annotations

from tailhound.capacity_file import CAPACITY_SIGNALS
from tailhound.capacity_file import SETTING as CAPACITY_SETTING
from tailhound.catalog import Catalog, default_catalog
from tailhound.catalog.clock_events import CLOCK_EVENT_REASONS, THERMAL_REASONS_MASK
from tailhound.snapshot import Snapshot

SignalValues = dict[str, dict[str, float]]

#: derived signal -> (per, (numerator, denominator))
DERIVED_SIGNALS: dict[str, tuple[str, tuple[str, str]]] = {
    "gpu.sm_clock_ratio": ("gpu", ("gpu.sm_clock", "gpu.sm_clock_max")),
    # TGI has no KV-cache usage gauge: the share of its KV token budget the running batch has reserved
    "engine.kv_cache_reserved": ("engine", ("engine.batch_max_tokens", "engine.batch_token_capacity")),
}


#: Per-engine limits from the settings, by the engine's model: signal -> the setting that gives them (the
#: service levels, and the thresholds of the capacity file: tailhound/capacity_file.py)
SLA_SIGNALS = {"sla.ttft_p99": "ttft_p99_sla_s", **{signal: CAPACITY_SETTING for signal in CAPACITY_SIGNALS}}
#: Per-engine demand computed from finished requests and in-flight history (see streams/demand.py)
DEMAND_SIGNALS = frozenset({"engine.arrival_rate"})

#: 0/1 flags decoded from a bitmask signal: flag -> (per, mask signal, bits)
FLAG_SIGNALS: dict[str, tuple[str, str, int]] = {
    "gpu.thermal_throttle_flag": ("gpu", "gpu.clock_event_reasons", THERMAL_REASONS_MASK),
    "gpu.power_cap_flag": ("gpu", "gpu.clock_event_reasons", 0x4 | 0x80),
}


#: Window statistics the streams code derives from histogram signals: ``latency.ttft.p95`` ...
HISTOGRAM_STATS = ("p50", "p95", "p99", "mean", "window_count")


def signal_per(name: str, catalog: Catalog | None = None) -> tuple[str, ...] | None:
    """The entity labels of a signal name rules may use, or None if no such signal exists.

    Catalog signals, derived ratios, ``<counter>.rate`` (per second over the collection interval) and
    ``<histogram>.p95`` style window statistics.
    """
    catalog = catalog or default_catalog()
    key = (name, id(catalog))
    if key in _PER_CACHE:
        return _PER_CACHE[key]
    per = _signal_per(name, catalog)
    if len(_PER_CACHE) < 65536:
        _PER_CACHE[key] = per
    return per


_PER_CACHE: dict[tuple[str, int], tuple[str, ...] | None] = {}

#: Ratios of two counter rates (numerator, denominator), computed on the merged view.
RATE_RATIOS: dict[str, tuple[str, str]] = {
    "net.tcp_retrans_ratio": ("net.tcp_retrans_segs.rate", "net.tcp_out_segs.rate"),
    "engine.prefix_cache_hit_ratio": ("engine.prefix_cache_hits.rate", "engine.prefix_cache_queries.rate"),
    "net.connect_failure_rate_ratio": ("net.connect_failures.rate", "net.connect_attempts.rate"),
    "engine.http_rejection_ratio": ("engine.http_rejections.rate", "engine.http_requests.rate"),
    # TGI: failed requests (tgi_request_failure) over arrivals (tgi_request_count); it has no HTTP status counter
    "engine.request_failure_ratio": ("engine.http_rejections.rate", "engine.requests_received.rate"),
}


def _signal_per(name: str, catalog: Catalog) -> tuple[str, ...] | None:
    spec = catalog.spec(name)
    if spec is not None:
        return spec.per
    if name in DERIVED_SIGNALS:
        return (DERIVED_SIGNALS[name][0],)
    if name in FLAG_SIGNALS:
        return (FLAG_SIGNALS[name][0],)
    if name in SLA_SIGNALS or name in DEMAND_SIGNALS:
        return ("engine",)
    if name in RATE_RATIOS:  # ratios of rates: per like their numerator
        return signal_per(RATE_RATIOS[name][0], catalog)
    base, _, suffix = name.rpartition(".")
    spec = catalog.spec(base)
    if spec is None:
        return None
    if suffix == "rate" and spec.kind == "counter":
        return spec.per
    if suffix in HISTOGRAM_STATS and spec.kind == "histogram":
        return spec.per
    return None


def decode_clock_event_reasons(mask: float | int) -> list[str]:
    m = int(mask)
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if m & bit]


def extract(snapshot: Snapshot, catalog: Catalog | None = None) -> SignalValues:
    catalog = catalog or default_catalog()
    out: SignalValues = {}
    for sample in snapshot.samples:
        if sample.kind == "histogram":
            continue  # histograms become signals through windows (streams issue)
        found = catalog.lookup(snapshot.source, sample.name, sample.labels)
        if found is None:
            continue
        spec, scale = found
        if spec.kind != "gauge" or sample.kind != "gauge":
            continue  # counters become rates through their deltas (streams issue)
        entity = spec.entity(sample.labels, snapshot.labels)
        if entity is None:
            continue
        out.setdefault(spec.name, {})[entity] = sample.value * scale
    add_flags_and_ratios(out)
    return out


def add_flags_and_ratios(out: SignalValues) -> None:
    """The flags decoded from bitmask signals and the derived ratios of one snapshot's values."""
    for name, (_per, mask_signal, bits) in FLAG_SIGNALS.items():
        masks = out.get(mask_signal)
        if masks:
            out[name] = {e: 1.0 if int(m) & bits else 0.0 for e, m in masks.items()}
    for name, (_per, (num, den)) in DERIVED_SIGNALS.items():
        add_ratio(out, name, num, den)


def add_ratio(out: SignalValues, name: str, num: str, den: str) -> None:
    """``out[name] = out[num] / out[den]`` per entity present in both (denominator not 0)."""
    nums, dens = out.get(num), out.get(den)
    if not nums or not dens:
        return
    ratios = {e: nums[e] / dens[e] for e in nums if dens.get(e)}
    if ratios:
        out[name] = ratios
