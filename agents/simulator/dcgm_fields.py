"""dcgm-exporter's default field list, as the simulator uses it: what a stock dcgm-exporter exports.

The list itself is the packaged copy of dcgm-exporter's ``etc/default-counters.csv``
(``tailhound/catalog/dcgm-default-counters.csv``, read by :mod:`tailhound.catalog.dcgm_counters`), so the
simulator's "default" profile, ``tailhound doctor`` and the coverage checks agree on one file. Fields the
simulator models but the list leaves out (so a default deployment never sees them):
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (the throttle-reason bitmask), DCGM_FI_DEV_MAX_SM_CLOCK,
DCGM_FI_DEV_SLOWDOWN_TEMP, DCGM_FI_PROF_NVLINK_TX_BYTES / RX_BYTES, the per-link NVLink counters and the
PCIe link generation and width. ``label`` fields (DCGM_FI_DRIVER_VERSION) become a label on every series
instead of a series of their own.
"""

from __future__ import annotations

from tailhound.catalog.dcgm_counters import default_counters

#: (field, Prometheus type) of every enabled line of default-counters.csv.
DCGM_DEFAULT_COUNTERS: tuple[tuple[str, str], ...] = tuple(
    (c.field, c.kind) for c in default_counters().values() if c.enabled
)

#: The fields exported as series (every field that is not a label).
DEFAULT_SERIES: frozenset[str] = frozenset(f for f, kind in DCGM_DEFAULT_COUNTERS if kind != "label")

#: Driver version the simulated fleet reports in the DCGM_FI_DRIVER_VERSION label.
DRIVER_VERSION = "550.90.07"
