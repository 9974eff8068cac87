"""dcgm-exporter's default field list, as data: what a stock dcgm-exporter exports.

Origin: ``etc/default-counters.csv`` of NVIDIA/dcgm-exporter (the 3.3/4.x list with the DCP profiling
fields; the project keeps a copy as ``shared/reference/dcgm_default-counters.csv``). Every uncommented
line is one field: ``DCGM FIELD, Prometheus metric type, help``. Fields the simulator models but this
list leaves out (so a default deployment never sees them): DCGM_FI_DEV_CLOCKS_EVENT_REASONS (the
throttle-reason bitmask), DCGM_FI_DEV_MAX_SM_CLOCK, DCGM_FI_DEV_SLOWDOWN_TEMP, DCGM_FI_PROF_NVLINK_TX_BYTES /
RX_BYTES, the per-link NVLink counters and the PCIe link generation and width. ``label`` fields
(DCGM_FI_DRIVER_VERSION) become a label on every series instead of a series of their own.
"""

from __future__ import annotations

#: (field, Prometheus type) of every uncommented line of default-counters.csv, in file order.
DCGM_DEFAULT_COUNTERS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
    ("DCGM_FI_DRIVER_VERSION", "label"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"),
)

#: The fields exported as series (every field that is not a label).
DEFAULT_SERIES: frozenset[str] = frozenset(f for f, kind in DCGM_DEFAULT_COUNTERS if kind != "label")

#: Driver version the simulated fleet reports in the DCGM_FI_DRIVER_VERSION label.
DRIVER_VERSION = "550.90.07"
