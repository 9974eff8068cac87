"""What the NVML collector reads and keeps per GPU, and how a reading is written (pure: no NVML calls).

:mod:`tailhound.agents.collectors.nvml` makes the NVML calls and fills a :class:`GpuReading` in NVML's own units
(percent, bytes, mW, KB/s); :func:`render_gpu` converts to the project's units and names. Every value
is optional: ``None`` means NVML could not tell (not supported, no permission, transient error) and the
metric is left out -- absent, never 0.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tailhound.agents.render import ExpositionWriter
from tailhound.catalog.clock_events import CLOCK_EVENT_REASONS

#: Field ids (pynvml constants, repeated so the pure side needs no pynvml) and names for log lines.
FI_NVLINK_THROUGHPUT_DATA_TX = 138
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_NVLINK_GET_SPEED = 164
FI_NVLINK_GET_STATE = 165  # enum: 0 inactive, 1 active, 2 sleep, 3 active with traffic disabled
FIELD_NAMES = {
    FI_NVLINK_THROUGHPUT_DATA_TX: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
    FI_NVLINK_THROUGHPUT_DATA_RX: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
    FI_NVLINK_GET_SPEED: "NVML_FI_DEV_NVLINK_GET_SPEED",
    FI_NVLINK_GET_STATE: "NVML_FI_DEV_NVLINK_GET_STATE",
}
#: NVLink field id -> the NvLinkReading attribute it fills (scopeId = link).
NVLINK_FIELDS = {
    FI_NVLINK_GET_SPEED: "speed_mbyte_s",
    FI_NVLINK_THROUGHPUT_DATA_TX: "tx_kib",
    FI_NVLINK_THROUGHPUT_DATA_RX: "rx_kib",
    FI_NVLINK_GET_STATE: "up",
}
#: NVML_FI_DEV_NVLINK_GET_STATE values that say what nvmlDeviceGetNvLinkState says (ACTIVE is ENABLED,
#: INACTIVE is DISABLED). For the others (SLEEP, ACTIVE_TRAFFIC_DISABLED) the per-link call decides, so
#: ``tailhound_gpu_nvlink_up`` keeps its meaning.
_LINK_UP = {1.0: True, 0.0: False}

#: c_nvmlFieldValue_t.valueType -> the member of the c_nvmlValue_t union that holds the value.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
#: The same members as struct formats (native sizes: c_ulong is 8 bytes on Linux, 4 on Windows).
_VALUE_STRUCTS = {
    t: struct.Struct("@" + f) for t, f in {0: "d", 1: "I", 2: "L", 3: "Q", 4: "q", 5: "i", 6: "H"}.items()
}
#: c_nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value (8 bytes).
_FIELD_VALUE = struct.Struct("@IIqqII8x")
_VALUE_OFFSET = 32

DRAM_MEASURE_GPM = "gpm_dram_bw_util"
DRAM_MEASURE_PROXY = "memory_busy_time"
MIB = 2**20


#: pynvml's structures override __getattribute__ in Python (bytes -> str); for the numeric fields of
#: field values the plain ctypes descriptor gives the same result without that per-access cost.
_raw = object.__getattribute__


def field_value(fv: Any) -> float | None:
    """The value of one c_nvmlFieldValue_t by its valueType (None for a type NVML does not define)."""
    member = _VALUE_MEMBERS.get(int(_raw(fv, "valueType")))
    return None if member is None else float(_raw(_raw(fv, "value"), member))


@lru_cache(maxsize=4)
def _packed(struct_type: type) -> bool:
    """Whether this pynvml's c_nvmlFieldValue_t has the layout `_FIELD_VALUE` reads."""
    offsets = {
        name: getattr(struct_type, name, None) for name in ("fieldId", "scopeId", "valueType", "nvmlReturn", "value")
    }
    want = {"fieldId": 0, "scopeId": 4, "valueType": 24, "nvmlReturn": 28, "value": _VALUE_OFFSET}
    return ctypes.sizeof(struct_type) == _FIELD_VALUE.size and all(
        d is not None and d.offset == want[name] for name, d in offsets.items()
    )


def read_field_values(values: Any) -> list[tuple[int, int, int, float | None]]:
    """(fieldId, scopeId, nvmlReturn, value) of each element of nvmlDeviceGetFieldValues' answer.

    The answer is a ctypes array of c_nvmlFieldValue_t: it is read in one pass over its bytes (the agent
    reads ~600 field values a collection on an 8-GPU NVLink node); anything else element by element."""
    if isinstance(values, ctypes.Array) and _packed(values._type_):
        buf = memoryview(values).cast("B")
        size, out = _FIELD_VALUE.size, []
        for i, (fid, scope, _ts, _latency, vtype, ret) in enumerate(_FIELD_VALUE.iter_unpack(buf)):
            unpack = _VALUE_STRUCTS.get(vtype)
            value = None if unpack is None else float(unpack.unpack_from(buf, size * i + _VALUE_OFFSET)[0])
            out.append((fid, scope, ret, value))
        return out
    return [
        (int(_raw(fv, "fieldId")), int(_raw(fv, "scopeId")), int(_raw(fv, "nvmlReturn")), field_value(fv))
        for fv in values
    ]


def nvlink_field_requests(links: tuple[int, ...], state: bool = True) -> list[tuple[int, int]]:
    """The (field id, scope id = link) pairs for one nvmlDeviceGetFieldValues call over all links;
    `state`: with NVML_FI_DEV_NVLINK_GET_STATE (drivers before it answer NOT_SUPPORTED per element)."""
    fields = [f for f in NVLINK_FIELDS if state or f != FI_NVLINK_GET_STATE]
    return [(fid, link) for link in links for fid in fields]


def apply_nvlink_fields(readings: dict[int, NvLinkReading], values: Any) -> list[tuple[int, int]]:
    """Copy every answered field into its link's reading; returns (field id, nvmlReturn) of the others.

    The call as a whole can succeed while single fields fail, so each element's nvmlReturn is checked.
    A link state other than active/inactive leaves ``up`` None (the caller asks the per-link call).
    """
    failed = []
    for fid, link, ret, value in read_field_values(values):
        attr, reading = NVLINK_FIELDS.get(fid), readings.get(link)
        if attr is None or reading is None:
            continue
        if ret != 0:  # NVML_SUCCESS
            failed.append((fid, ret))
            continue
        if fid == FI_NVLINK_GET_STATE:
            reading.up = _LINK_UP.get(value)
        else:
            setattr(reading, attr, value)
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

    _label_sets: dict[tuple[str, str] | None, dict[str, str]] = field(default_factory=dict, repr=False, compare=False)

    def labels(self) -> dict[str, str]:
        """Labels of every per-GPU sample: the index only (uuid and model name are on ``tailhound_gpu_up``,
        once per GPU, which halves the size of an 8-GPU snapshot). Built once; never modify it."""
        return self.labels_with(None, "")

    def labels_with(self, name: str | None, value: str) -> dict[str, str]:
        """The GPU's labels plus ``name=value`` (a link, a reason), built once per GPU; never modify it."""
        key = None if name is None else (name, value)
        labels = self._label_sets.get(key)
        if labels is None:
            labels = {"gpu": str(self.index)} if name is None else {"gpu": str(self.index), name: value}
            self._label_sets[key] = labels
        return labels

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


_H_PCIE_TX = "PCIe send throughput (GPM: mean over the interval; else a 20 ms sample)."
_H_PCIE_RX = "PCIe receive throughput (GPM: mean over the interval; else a 20 ms sample)."
# Asked of GPM in one nvmlGpmMetricsGet per collection, in this order (pynvml's NVML_GPM_METRIC_*).
GPM_DRAM_BW_UTIL, GPM_PCIE_TX_PER_SEC, GPM_PCIE_RX_PER_SEC = 10, 20, 21
GPM_METRICS = (GPM_DRAM_BW_UTIL, GPM_PCIE_TX_PER_SEC, GPM_PCIE_RX_PER_SEC)


@dataclass
class GpmBuffers:
    """Two GPM sample buffers per GPU (the previous one and the one taken now) and the request struct."""

    samples: list[Any]
    request: Any
    have_previous: bool = False


@dataclass
class GpuState:
    """What the collector keeps per GPU between collections."""

    index: int
    handle: Any = None
    info: GpuInfo | None = None
    gpm: GpmBuffers | None = None
    nvlink_state_field: bool = True  # NVML_FI_DEV_NVLINK_GET_STATE answers (off once a driver says no)
    nvlink_requests: list[tuple[int, int]] | None = None  # the (field id, link) pairs, built once
    xid_watched: bool = False
    xid_errors: int = 0
    last_xid: int | None = None
    lost: bool = False


def handle_key(handle: Any) -> Any:
    """A hashable identity of an NVML device handle (its address)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else min(max(pct / 100.0, 0.0), 1.0)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


_G, _C = "gauge", "counter"
_H_LINK_UP = "1 if the NVLink is up."
_H_LINK_SPEED = "NVLink speed (Mbit/s)."
_H_LINK_TX = "NVLink data sent (KiB)."
_H_LINK_RX = "NVLink data received (KiB)."
_H_REASON = "1 while this clock event reason is active."
_H_DRAM = "DRAM bandwidth utilisation 0..1."
_H_ECC = "ECC errors (volatile)."


def render_gpu(w: ExpositionWriter, r: GpuReading) -> None:
    """Write one GPU's reading; a None value writes nothing.

    One row per value, in a fixed order (the order of the families and samples in the text); ~820 rows
    for 8 GPUs, so the label sets come from the GPU's static info instead of being built every time."""
    info = r.info
    base, lab = info.labels(), info.labels_with
    rows: list[tuple] = [
        (
            _G,
            "tailhound_gpu_utilization_ratio",
            "Fraction of the sample period with at least one kernel running (NVML utilization.gpu).",
            base,
            _ratio(r.utilization_gpu_pct),
        ),
        (
            _G,
            "tailhound_gpu_memory_busy_ratio",
            "Fraction of time device memory was read or written (NVML utilization.memory); time, not bandwidth.",
            base,
            _ratio(r.utilization_memory_pct),
        ),
        (
            _G,
            "tailhound_gpu_dram_bw_util_ratio",
            _H_DRAM,
            lab("measure", DRAM_MEASURE_GPM),
            _ratio(r.gpm_dram_bw_util_pct),
        )
        if info.gpm
        else (
            _G,
            "tailhound_gpu_dram_bw_util_ratio",
            _H_DRAM,
            lab("measure", DRAM_MEASURE_PROXY),
            _ratio(r.utilization_memory_pct),
        ),
        (_G, "tailhound_gpu_memory_used_mib", "Framebuffer memory used.", base, _scaled(r.memory_used_bytes, 1 / MIB)),
        (
            _G,
            "tailhound_gpu_memory_total_mib",
            "Framebuffer memory total.",
            base,
            _scaled(r.memory_total_bytes, 1 / MIB),
        ),
        (_G, "tailhound_gpu_temperature_celsius", "GPU temperature.", base, r.temperature_c),
        (
            _G,
            "tailhound_gpu_slowdown_temperature_celsius",
            "Temperature at which the GPU slows its clocks.",
            base,
            info.slowdown_temperature_c,
        ),
        (_G, "tailhound_gpu_sm_clock_mhz", "Current SM clock.", base, r.sm_clock_mhz),
        (_G, "tailhound_gpu_sm_clock_max_mhz", "Maximum SM clock.", base, info.sm_clock_max_mhz),
    ]
    if r.clock_event_reasons is not None:
        mask = int(r.clock_event_reasons)
        rows.append(
            (_G, "tailhound_gpu_clock_event_reasons", "NVML clock event (throttle) reasons bitmask.", base, mask)
        )
        rows += [
            (_G, "tailhound_gpu_clock_event_reason", _H_REASON, lab("reason", name), 1 if mask & bit else 0)
            for bit, name in CLOCK_EVENT_REASONS.items()
        ]
    rows.append((_G, "tailhound_gpu_power_watts", "Power draw.", base, _scaled(r.power_mw, 1e-3)))
    rows.append((_G, "tailhound_gpu_power_limit_watts", "Enforced power limit.", base, _scaled(r.power_limit_mw, 1e-3)))
    for link in r.nvlinks:
        labels, up, speed = lab("link", str(link.link)), link.up, link.speed_mbyte_s
        rows += (
            (_G, "tailhound_gpu_nvlink_up", _H_LINK_UP, labels, None if up is None else int(up)),
            (_G, "tailhound_gpu_nvlink_speed_mbps", _H_LINK_SPEED, labels, None if speed is None else speed * 8),
            (_C, "tailhound_gpu_nvlink_tx_kib_total", _H_LINK_TX, labels, link.tx_kib),
            (_C, "tailhound_gpu_nvlink_rx_kib_total", _H_LINK_RX, labels, link.rx_kib),
        )
    rows += [
        (_G, "tailhound_gpu_pcie_tx_bytes_per_second", _H_PCIE_TX, base, _scaled(r.pcie_tx_kb_s, 1024)),
        (_G, "tailhound_gpu_pcie_rx_bytes_per_second", _H_PCIE_RX, base, _scaled(r.pcie_rx_kb_s, 1024)),
        (_G, "tailhound_gpu_pcie_link_gen", "Current PCIe link generation (drops when idle).", base, r.pcie_gen),
        (_G, "tailhound_gpu_pcie_link_width", "Current PCIe link width.", base, r.pcie_width),
        (_G, "tailhound_gpu_pcie_link_gen_max", "Maximum PCIe link generation.", base, info.pcie_gen_max),
        (_G, "tailhound_gpu_pcie_link_width_max", "Maximum PCIe link width.", base, info.pcie_width_max),
        (
            _C,
            "tailhound_gpu_xid_errors_total",
            "XID critical error events seen since the agent started.",
            base,
            r.xid_errors,
        ),
        (_G, "tailhound_gpu_last_xid", "The last XID code seen.", base, r.last_xid),
        (_C, "tailhound_gpu_ecc_errors_total", _H_ECC, lab("type", "corrected"), r.ecc_corrected),
        (_C, "tailhound_gpu_ecc_errors_total", _H_ECC, lab("type", "uncorrected"), r.ecc_uncorrected),
    ]
    w.add_rows(rows)


def render_gpu_up(w: ExpositionWriter, index: int, info: GpuInfo | None, up: bool) -> None:
    """``tailhound_gpu_up``: 0 for a GPU NVML lost (its other metrics are then absent)."""
    labels = info.identity() if info is not None else {"gpu": str(index)}
    w.gauge(
        "tailhound_gpu_up",
        1 if up else 0,
        labels,
        "1 if NVML could read the GPU, 0 if it is lost; carries the GPU's uuid and model name.",
    )
