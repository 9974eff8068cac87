"""A fake NVIDIA driver behind the real ``pynvml`` module: 8 H100-like GPUs with mutable state.

``FakeNvml(...).install(monkeypatch)`` replaces the NVML functions of the real module, so the code
under test keeps pynvml's real constants, ctypes structs and exception classes. Errors are raised the
way pynvml raises them: ``pynvml.NVMLError(code)`` returns the subclass (NVMLError_NotSupported ...).
Handles, event sets and GPM samples are real ctypes pointers; the fake finds its objects by address.

``FakeNvml.fleet()`` is the mixed node the tests use: GPU 2 has NVLink 7 down, GPU 3 has no ECC
counters, GPU 5 no PCIe throughput, neither the call nor GPM's (like vGPU), GPU 6 reports GPM
unsupported (like A100) and on GPU 7 the GPM query itself raises NotSupported.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import pynvml

H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY_BYTES = 85_520_809_984  # 81559 MiB, what an H100 80GB HBM3 reports


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # the real library maps the code to its subclass


def _address(ptr) -> int | None:
    return ctypes.cast(ptr, ctypes.c_void_p).value


@dataclass
class FakeGpu:
    index: int
    name: str = H100_NAME
    temperature_c: int = 45
    slowdown_c: int = 87
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    clock_event_reasons: int = 0
    util_gpu_pct: int = 90
    util_memory_pct: int = 40
    dram_bw_util_pct: float = 55.0  # what GPM DRAM_BW_UTIL reports between two samples
    gpm_supported: bool = True
    gpm_pcie: bool = True  # GPM answers PCIE_TX/RX_PER_SEC (MiB/s) as on an H200
    memory_total: int = H100_MEMORY_BYTES
    memory_used: int = 40 * 2**30
    power_mw: int = 450_000
    power_limit_mw: int = 700_000
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_gen_max: int = 5
    pcie_width_max: int = 16
    pcie_tx_kb_s: int = 1_000_000
    pcie_rx_kb_s: int = 2_000_000
    nvlink_count: int = 18
    nvlink_down: set[int] = field(default_factory=set)
    nvlink_speed_mbyte_s: int = 26_562  # NVML reports MBps; nvidia-smi shows 26.562 GB/s per H100 link
    nvlink_kib_per_read: int = 1_000  # each read of an up link's counter finds this much more traffic
    nvlink_state_field: bool = True  # False: a driver that predates NVML_FI_DEV_NVLINK_GET_STATE
    nvlink_sleeping: set[int] = field(default_factory=set)  # links in NVML_NVLINK_STATE_SLEEP (still ENABLED)
    nvlink_tx_kib: dict[int, int] = field(default_factory=dict)
    nvlink_rx_kib: dict[int, int] = field(default_factory=dict)
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    not_supported: set[str] = field(default_factory=set)  # NVML function names that raise NotSupported
    lost: bool = False  # every call on this GPU raises GpuIsLost

    @property
    def uuid(self) -> str:
        return f"GPU-{self.index:08x}-0000-4000-8000-000000000000"


class FakeGpmSample(NamedTuple):
    gpu: int
    seq: int
    dram_pct: float
    pcie_mib_s: tuple[float, float] | None  # (tx, rx)


class FakeNvml:
    def __init__(self, gpu_count: int = 8, driver: bool = True) -> None:
        self.driver = driver
        self.gpus = [FakeGpu(index=i, temperature_c=40 + i) for i in range(gpu_count)]
        self.initialised = 0
        self.calls: Counter[tuple[str, int | None]] = Counter()
        self._handles = [pynvml.c_nvmlDevice_t(pynvml.struct_c_nvmlDevice_t()) for _ in self.gpus]
        self._by_address = {_address(h): g for h, g in zip(self._handles, self.gpus, strict=True)}
        self._event_sets: dict[int, tuple[set[int], list[tuple[int, int]]]] = {}  # address -> (gpus, queue)
        self._gpm_samples: dict[int, FakeGpmSample | None] = {}  # address -> what the sample saw
        self._keep: list = []  # ctypes objects whose addresses are handed out
        self._seq = 0

    @classmethod
    def fleet(cls) -> FakeNvml:
        fake = cls()
        fake.gpus[2].nvlink_down.add(7)
        fake.gpus[3].not_supported.add("nvmlDeviceGetTotalEccErrors")
        fake.gpus[5].not_supported.add("nvmlDeviceGetPcieThroughput")
        fake.gpus[5].gpm_pcie = False
        fake.gpus[6].gpm_supported = False
        fake.gpus[7].not_supported.add("nvmlGpmQueryDeviceSupport")
        return fake

    def install(self, monkeypatch) -> FakeNvml:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        monkeypatch.setattr(pynvml, "nvmlEventSetWait", self.nvmlEventSetWait_v2)
        return self

    def inject_xid(self, gpu: int, xid: int) -> None:
        """An XID critical error on `gpu`: delivered to every event set registered for it."""
        for registered, queue in self._event_sets.values():
            if gpu in registered:
                queue.append((gpu, xid))

    # -- plumbing --------------------------------------------------------------------------------------

    def _check_init(self) -> None:
        if not self.initialised:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, fn: str, handle) -> FakeGpu:
        self._check_init()
        gpu = self._by_address.get(_address(handle))
        if gpu is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.calls[(fn, gpu.index)] += 1
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.not_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _pointer(self, pointer_type, struct_type):
        ptr = pointer_type(struct_type())
        self._keep.append(ptr)
        return ptr

    # -- library ---------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.driver:
            raise nvml_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self._handles[index]

    # -- device ----------------------------------------------------------------------------------------

    def nvmlDeviceGetIndex(self, handle) -> int:
        return self._gpu("nvmlDeviceGetIndex", handle).index

    def nvmlDeviceGetName(self, handle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle):
        g = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(gpu=g.util_gpu_pct, memory=g.util_memory_pct)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        g = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return pynvml.c_nvmlMemory_t(total=g.memory_total, free=g.memory_total - g.memory_used, used=g.memory_used)

    def nvmlDeviceGetTemperature(self, handle, sensor: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature_c

    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperatureThreshold", handle)
        if threshold != pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.slowdown_c

    def nvmlDeviceGetClockInfo(self, handle, type: int) -> int:
        g = self._gpu("nvmlDeviceGetClockInfo", handle)
        return g.sm_clock_mhz if type == pynvml.NVML_CLOCK_SM else 1593

    def nvmlDeviceGetMaxClockInfo(self, handle, type: int) -> int:
        g = self._gpu("nvmlDeviceGetMaxClockInfo", handle)
        return g.sm_clock_max_mhz if type == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_event_reasons

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetPcieThroughput(self, handle, counter: int) -> int:
        g = self._gpu("nvmlDeviceGetPcieThroughput", handle)
        return g.pcie_tx_kb_s if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else g.pcie_rx_kb_s

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType: int, counterType: int) -> int:
        g = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        return g.ecc_corrected if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else g.ecc_uncorrected

    def nvmlDeviceGetNvLinkState(self, device, link: int) -> int:
        g = self._gpu("nvmlDeviceGetNvLinkState", device)
        if not 0 <= link < g.nvlink_count:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_DISABLED if link in g.nvlink_down else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        g = self._gpu("nvmlDeviceGetFieldValues", handle)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for fv, wanted in zip(values, fieldIds, strict=True):
            fv.fieldId, fv.scopeId = wanted if isinstance(wanted, tuple) else (wanted, 0)
            self._field(g, fv)
        return values

    def _field(self, g: FakeGpu, fv) -> None:
        link, up = fv.scopeId, fv.scopeId not in g.nvlink_down
        fv.nvmlReturn = pynvml.NVML_SUCCESS
        if link >= g.nvlink_count or fv.fieldId not in (
            pynvml.NVML_FI_DEV_NVLINK_GET_SPEED,
            pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ):
            fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        elif fv.fieldId == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            if not g.nvlink_state_field:
                fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                return
            state = (
                pynvml.NVML_NVLINK_STATE_INACTIVE
                if not up
                else pynvml.NVML_NVLINK_STATE_SLEEP
                if link in g.nvlink_sleeping
                else pynvml.NVML_NVLINK_STATE_ACTIVE
            )
            fv.valueType, fv.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, state
        elif fv.fieldId == pynvml.NVML_FI_DEV_NVLINK_GET_SPEED:
            fv.valueType, fv.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, g.nvlink_speed_mbyte_s if up else 0
        else:
            tx = fv.fieldId == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
            counters = g.nvlink_tx_kib if tx else g.nvlink_rx_kib
            counters[link] = counters.get(link, 0) + (g.nvlink_kib_per_read if up else 0)
            fv.valueType, fv.value.ullVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, counters[link]

    # -- events ----------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self):
        self._check_init()
        event_set = self._pointer(pynvml.c_nvmlEventSet_t, pynvml.struct_c_nvmlEventSet_t)
        self._event_sets[_address(event_set)] = (set(), [])
        return event_set

    def nvmlDeviceRegisterEvents(self, handle, eventTypes: int, eventSet) -> None:
        g = self._gpu("nvmlDeviceRegisterEvents", handle)
        if eventTypes & ~pynvml.nvmlEventTypeXidCriticalError:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._event_sets[_address(eventSet)][0].add(g.index)

    def nvmlEventSetWait_v2(self, eventSet, timeoutms: int):
        self._check_init()
        _registered, queue = self._event_sets[_address(eventSet)]
        if not queue:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        gpu, xid = queue.pop(0)
        return pynvml.c_nvmlEventData_t(
            device=self._handles[gpu], eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid
        )

    def nvmlEventSetFree(self, eventSet) -> None:
        self._check_init()
        del self._event_sets[_address(eventSet)]

    # -- GPM -------------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, device):
        g = self._gpu("nvmlGpmQueryDeviceSupport", device)
        return pynvml.c_nvmlGpmSupport_t(version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=g.gpm_supported)

    def nvmlGpmSampleAlloc(self):
        self._check_init()
        sample = self._pointer(pynvml.c_nvmlGpmSample_t, pynvml.struct_c_nvmlGpmSample_t)
        self._gpm_samples[_address(sample)] = None
        return sample

    def nvmlGpmSampleFree(self, gpmSample) -> None:
        self._check_init()
        del self._gpm_samples[_address(gpmSample)]

    def nvmlGpmSampleGet(self, device, gpmSample):
        g = self._gpu("nvmlGpmSampleGet", device)
        if not g.gpm_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._seq += 1
        self._gpm_samples[_address(gpmSample)] = FakeGpmSample(
            g.index,
            self._seq,
            g.dram_bw_util_pct,
            (g.pcie_tx_kb_s / 1024, g.pcie_rx_kb_s / 1024) if g.gpm_pcie else None,
        )
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet):
        self._check_init()
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._gpm_samples[_address(metricsGet.sample1)]
        second = self._gpm_samples[_address(metricsGet.sample2)]
        if first is None or second is None or first.gpu != second.gpu or first.seq >= second.seq:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        pcie = {pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 0, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 1}
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            if metric.metricId == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, second.dram_pct
            elif metric.metricId in pcie and second.pcie_mib_s is not None:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, second.pcie_mib_s[pcie[metric.metricId]]
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return metricsGet
