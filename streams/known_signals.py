"""Every signal name a rule may use (for hints: "did you mean ..."), from the catalog and the names the
streams code derives (see :func:`tailhound.streams.extract.signal_per`, which decides what is valid)."""

from __future__ import annotations

from tailhound.catalog import Catalog, default_catalog

from .extract import DEMAND_SIGNALS, DERIVED_SIGNALS, FLAG_SIGNALS, HISTOGRAM_STATS, RATE_RATIOS, SLA_SIGNALS


def known_signals(catalog: Catalog | None = None) -> frozenset[str]:
    catalog = catalog or default_catalog()
    cached = catalog.memo.get("known_signals")
    if cached is not None:
        return cached
    names: set[str] = set(DERIVED_SIGNALS) | set(FLAG_SIGNALS) | set(SLA_SIGNALS) | set(DEMAND_SIGNALS)
    names |= set(RATE_RATIOS)
    for name, spec in catalog.signals.items():
        names.add(name)
        if spec.kind == "counter":
            names.add(f"{name}.rate")
        elif spec.kind == "histogram":
            names.update(f"{name}.{stat}" for stat in HISTOGRAM_STATS)
    found = catalog.memo["known_signals"] = frozenset(names)
    return found
