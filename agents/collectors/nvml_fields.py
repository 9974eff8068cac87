"""What the NVML collector reads per GPU, and how a reading renders as exposition text (pure).

:mod:`agents.collectors.nvml` makes the NVML calls and fills a :class:`GpuReading` in NVML's own units
(percent, bytes, mW, KB/s); :func:`render_gpu` converts to the project's units and names. Every value
is optional: ``None`` means NVML could not tell (not supported, no permission, transient error) and the
metric is left out -- absent, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.render import ExpositionWriter
from streams.signals import CLOCK_EVENT_REASONS

#: Field ids (pynvml constants, repeated so the pure side needs no pynvml) and names for log lines.
FI_NVLINK_THROUGHPUT_DATA_TX = 138
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_NVLINK_GET_SPEED = 164
FIELD_NAMES = {
    FI_NVLINK_THROUGHPUT_DATA_TX: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
    FI_NVLINK_THROUGHPUT_DATA_RX: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
    FI_NVLINK_GET_SPEED: "NVML_FI_DEV_NVLINK_GET_SPEED",
}
#: NVLink field id -> the NvLinkReading attribute it fills (scopeId = link).
NVLINK_FIELDS = {
    FI_NVLINK_GET_SPEED: "speed_mbyte_s",
    FI_NVLINK_THROUGHPUT_DATA_TX: "tx_kib",
    FI_NVLINK_THROUGHPUT_DATA_RX: "rx_kib",
}

#: c_nvmlFieldValue_t.valueType -> the member of the c_nvmlValue_t union that holds the value.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

DRAM_MEASURE_GPM = "gpm_dram_bw_util"
DRAM_MEASURE_PROXY = "memory_busy_time"
MIB = 2**20


#: pynvml's structures override __getattribute__ in Python (bytes -> str); for the numeric fields of
#: field values the plain ctypes descriptor gives the same result without that per-access cost (the
#: agent reads ~4k of them per collection on an 8-GPU NVLink node).
_raw = object.__getattribute__


def field_value(fv: Any) -> float | None:
    """The value of one c_nvmlFieldValue_t by its valueType (None for a type NVML does not define)."""
    member = _VALUE_MEMBERS.get(int(_raw(fv, "valueType")))
    return None if member is None else float(_raw(_raw(fv, "value"), member))


def nvlink_field_requests(links: tuple[int, ...]) -> list[tuple[int, int]]:
    """The (field id, scope id = link) pairs for one nvmlDeviceGetFieldValues call over all links."""
    return [(fid, link) for link in links for fid in NVLINK_FIELDS]


def apply_nvlink_fields(readings: dict[int, NvLinkReading], values: Any) -> list[tuple[int, int]]:
    """Copy every answered field into its link's reading; returns (field id, nvmlReturn) of the others.

    The call as a whole can succeed while single fields fail, so each element's nvmlReturn is checked.
    """
    failed = []
    for fv in values:
        fid, link, ret = int(_raw(fv, "fieldId")), int(_raw(fv, "scopeId")), int(_raw(fv, "nvmlReturn"))
        attr, reading = NVLINK_FIELDS.get(fid), readings.get(link)
        if attr is None or reading is None:
            continue
        if ret != 0:  # NVML_SUCCESS
            failed.append((fid, ret))
            continue
        setattr(reading, attr, field_value(fv))
    return failed


def text(value: str | bytes | None) -> str | None:
    """pynvml returns str on Python 3 but bytes from older wrappers."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


@dataclass
class GpuInfo:
    """What does not change while the agent runs (read once; a value NVML failed to give is retried)."""

    index: int
    uuid: str
    model: str
    sm_clock_max_mhz: float | None = None
    slowdown_temperature_c: float | None = None
    pcie_gen_max: float | None = None
    pcie_width_max: float | None = None
    nvlinks: tuple[int, ...] = ()
    gpm: bool = False  # DRAM bandwidth from GPM (Hopper+); otherwise the memory-busy-time proxy

    def labels(self) -> dict[str, str]:
        """Labels of every per-GPU sample: the index only (uuid and model name are on ``tailhound_gpu_up``,
        once per GPU, which halves the size of an 8-GPU snapshot)."""
        return {"gpu": str(self.index)}

    def identity(self) -> dict[str, str]:
        return {"gpu": str(self.index), "uuid": self.uuid, "model": self.model}


@dataclass
class NvLinkReading:
    link: int
    up: bool | None = None
    speed_mbyte_s: float | None = None  # NVML: "NVLink Speed in MBps" (megabytes/s; H100 ~26562)
    tx_kib: float | None = None
    rx_kib: float | None = None


@dataclass
class GpuReading:
    """One collection of one GPU, in NVML units."""

    info: GpuInfo
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    gpm_dram_bw_util_pct: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    clock_event_reasons: int | None = None
    power_mw: float | None = None
    power_limit_mw: float | None = None
    nvlinks: list[NvLinkReading] = field(default_factory=list)
    pcie_tx_kb_s: float | None = None
    pcie_rx_kb_s: float | None = None
    pcie_gen: float | None = None
    pcie_width: float | None = None
    xid_errors: int | None = None  # None: XID events cannot be watched on this GPU
    last_xid: int | None = None
    ecc_corrected: float | None = None
    ecc_uncorrected: float | None = None


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else min(max(pct / 100.0, 0.0), 1.0)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def render_gpu(w: ExpositionWriter, r: GpuReading) -> None:
    """Write one GPU's reading; a None value writes nothing."""
    base = r.info.labels()

    def gauge(name: str, value: float | None, help_: str, **extra: str) -> None:
        if value is not None:
            w.gauge(name, value, {**base, **extra}, help_)

    def counter(name: str, value: float | None, help_: str, **extra: str) -> None:
        if value is not None:
            w.counter(name, value, {**base, **extra}, help_)

    gauge("tailhound_gpu_utilization_ratio", _ratio(r.utilization_gpu_pct),
          "Fraction of the sample period with at least one kernel running (NVML utilization.gpu).")
    gauge("tailhound_gpu_memory_busy_ratio", _ratio(r.utilization_memory_pct),
          "Fraction of time device memory was read or written (NVML utilization.memory); time, not bandwidth.")
    if r.info.gpm:
        gauge("tailhound_gpu_dram_bw_util_ratio", _ratio(r.gpm_dram_bw_util_pct),
              "DRAM bandwidth utilisation 0..1.", measure=DRAM_MEASURE_GPM)
    else:
        gauge("tailhound_gpu_dram_bw_util_ratio", _ratio(r.utilization_memory_pct),
              "DRAM bandwidth utilisation 0..1.", measure=DRAM_MEASURE_PROXY)
    gauge("tailhound_gpu_memory_used_mib", _scaled(r.memory_used_bytes, 1 / MIB), "Framebuffer memory used.")
    gauge("tailhound_gpu_memory_total_mib", _scaled(r.memory_total_bytes, 1 / MIB), "Framebuffer memory total.")
    gauge("tailhound_gpu_temperature_celsius", r.temperature_c, "GPU temperature.")
    gauge("tailhound_gpu_slowdown_temperature_celsius", r.info.slowdown_temperature_c,
          "Temperature at which the GPU slows its clocks.")
    gauge("tailhound_gpu_sm_clock_mhz", r.sm_clock_mhz, "Current SM clock.")
    gauge("tailhound_gpu_sm_clock_max_mhz", r.info.sm_clock_max_mhz, "Maximum SM clock.")
    if r.clock_event_reasons is not None:
        mask = int(r.clock_event_reasons)
        gauge("tailhound_gpu_clock_event_reasons", mask, "NVML clock event (throttle) reasons bitmask.")
        for bit, name in CLOCK_EVENT_REASONS.items():
            gauge("tailhound_gpu_clock_event_reason", 1 if mask & bit else 0,
                  "1 while this clock event reason is active.", reason=name)
    gauge("tailhound_gpu_power_watts", _scaled(r.power_mw, 1e-3), "Power draw.")
    gauge("tailhound_gpu_power_limit_watts", _scaled(r.power_limit_mw, 1e-3), "Enforced power limit.")
    for link in r.nvlinks:
        n = str(link.link)
        gauge("tailhound_gpu_nvlink_up", None if link.up is None else int(link.up), "1 if the NVLink is up.", link=n)
        gauge("tailhound_gpu_nvlink_speed_mbps", _scaled(link.speed_mbyte_s, 8), "NVLink speed (Mbit/s).", link=n)
        counter("tailhound_gpu_nvlink_tx_kib_total", link.tx_kib, "NVLink data sent (KiB).", link=n)
        counter("tailhound_gpu_nvlink_rx_kib_total", link.rx_kib, "NVLink data received (KiB).", link=n)
    gauge("tailhound_gpu_pcie_tx_bytes_per_second", _scaled(r.pcie_tx_kb_s, 1024), "PCIe send throughput.")
    gauge("tailhound_gpu_pcie_rx_bytes_per_second", _scaled(r.pcie_rx_kb_s, 1024), "PCIe receive throughput.")
    gauge("tailhound_gpu_pcie_link_gen", r.pcie_gen, "Current PCIe link generation (drops when idle).")
    gauge("tailhound_gpu_pcie_link_width", r.pcie_width, "Current PCIe link width.")
    gauge("tailhound_gpu_pcie_link_gen_max", r.info.pcie_gen_max, "Maximum PCIe link generation.")
    gauge("tailhound_gpu_pcie_link_width_max", r.info.pcie_width_max, "Maximum PCIe link width.")
    counter("tailhound_gpu_xid_errors_total", r.xid_errors, "XID critical error events seen since the agent started.")
    gauge("tailhound_gpu_last_xid", r.last_xid, "The last XID code seen.")
    counter("tailhound_gpu_ecc_errors_total", r.ecc_corrected, "ECC errors (volatile).", type="corrected")
    counter("tailhound_gpu_ecc_errors_total", r.ecc_uncorrected, "ECC errors (volatile).", type="uncorrected")


def render_gpu_up(w: ExpositionWriter, index: int, info: GpuInfo | None, up: bool) -> None:
    """``tailhound_gpu_up``: 0 for a GPU NVML lost (its other metrics are then absent)."""
    labels = info.identity() if info is not None else {"gpu": str(index)}
    w.gauge("tailhound_gpu_up", 1 if up else 0, labels,
            "1 if NVML could read the GPU, 0 if it is lost; carries the GPU's uuid and model name.")
