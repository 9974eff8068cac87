"""The NVML GPU collector: per-GPU health and load straight from the driver, without DCGM.

Which NVML call gives which signal is ``shared/reference/nvml_calls.md``; what a reading is and how it renders
is :mod:`tailhound.agents.collectors.nvml_fields`; XID errors :mod:`tailhound.agents.collectors.nvml_xid`. No
driver -> :class:`CollectorUnavailable`, one line. Unsupported means absent, never 0: a call raising
NotSupported / NoPermission / FunctionNotFound is logged once and not called again for that GPU; other NVML
errors leave the metric out of this collection; a lost GPU reports only ``tailhound_gpu_up 0``. DRAM bandwidth
and PCIe traffic come from GPM where it answers (Hopper+), else from the memory-busy proxy (labelled so) and
nvmlDeviceGetPcieThroughput (the byte-counter fields 197/198 wrap at 32 bits). The collection runs in a worker
thread: the PCIe counter samples for 20 ms per call and calls on a failing GPU can block for seconds (costs:
BENCHMARKS.md, "NVML collector on a real GPU").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import CollectorUnavailable, local_node
from tailhound.agents.collectors.nvml_fields import (
    FI_NVLINK_GET_STATE,
    FIELD_NAMES,
    GPM_METRICS,
    GpmBuffers,
    GpuInfo,
    GpuReading,
    GpuState,
    NvLinkReading,
    apply_nvlink_fields,
    handle_key,
    nvlink_field_requests,
    render_gpu,
    render_gpu_up,
    text,
)
from tailhound.agents.collectors.nvml_xid import create_event_set, drain_xid_events, free_event_set
from tailhound.agents.render import ExpositionWriter
from tailhound.durations import Duration

log = logging.getLogger("tailhound.agent.nvml")

_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
_MISSING = object()
_REASONS_FN = "nvmlDeviceGetCurrentClocksEventReasons"
_REASONS_FN_OLD = "nvmlDeviceGetCurrentClocksThrottleReasons"  # drivers before r535


class NvmlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    interval_s: Duration = Field(default=1.0, gt=0)
    gpus: list[int] | None = Field(default=None, description="GPU indices to read; None: all.")
    nvlink: bool = True
    gpm: bool = True


class NvmlCollector:
    job = "nvml"

    def __init__(self, config: NvmlConfig, node: str | None = None, nvml: Any = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.node = node or local_node()
        self._nvml = nvml
        self._lock = threading.Lock()
        self._started = False
        self._gpus: list[GpuState] = []
        self._by_handle: dict[Any, GpuState] = {}
        self._event_set: Any = None
        self._unsupported: set[tuple[str, int]] = set()
        self._logged: set[tuple] = set()

    async def collect(self) -> list[CollectedRecord]:
        return await asyncio.to_thread(self._collect)

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    # -- collection ----------------------------------------------------------------------------------

    def _collect(self) -> list[CollectedRecord]:
        with self._lock:
            if not self._started:
                self._start()
            ts, t0 = time.time(), time.perf_counter()
            w = ExpositionWriter()
            drain_xid_events(self._nvml, self._event_set, self._by_handle, self._log_once)
            for gpu in self._gpus:
                reading = self._read_gpu(gpu)
                render_gpu_up(w, gpu.index, gpu.info, reading is not None)
                if reading is not None:
                    render_gpu(w, reading)
            w.gauge("tailhound_nvml_collect_seconds", time.perf_counter() - t0, help="Time this collection took.")
            return [CollectedRecord(ts=ts, node=self.node, job=self.job, writer=w, interval_s=self.interval_s)]

    def _read_gpu(self, gpu: GpuState) -> GpuReading | None:
        nv = self._nvml
        try:
            if not self._ensure_info(gpu):
                return None
            info, h = gpu.info, gpu.handle
            r = GpuReading(info=info)
            self._refresh_info(gpu)
            util = self._get(gpu, "nvmlDeviceGetUtilizationRates", h)
            if util is not None:
                r.utilization_gpu_pct, r.utilization_memory_pct = util.gpu, util.memory
            if gpu.gpm is not None:
                self._read_gpm(gpu, r)
            mem = self._get(gpu, "nvmlDeviceGetMemoryInfo", h)
            if mem is not None:
                r.memory_used_bytes, r.memory_total_bytes = mem.used, mem.total
            r.temperature_c = self._get(gpu, "nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
            r.sm_clock_mhz = self._get(gpu, "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM)
            r.clock_event_reasons = self._clock_event_reasons(gpu)
            r.power_mw = self._get(gpu, "nvmlDeviceGetPowerUsage", h)
            r.power_limit_mw = self._get(gpu, "nvmlDeviceGetEnforcedPowerLimit", h)
            r.nvlinks = self._read_nvlinks(gpu)
            if r.pcie_tx_kb_s is None or r.pcie_rx_kb_s is None:  # no GPM answer: the 20 ms sampling call
                r.pcie_tx_kb_s = self._get(gpu, "nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_TX_BYTES)
                r.pcie_rx_kb_s = self._get(gpu, "nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_RX_BYTES)
            r.pcie_gen = self._get(gpu, "nvmlDeviceGetCurrPcieLinkGeneration", h)
            r.pcie_width = self._get(gpu, "nvmlDeviceGetCurrPcieLinkWidth", h)
            for kind in ("corrected", "uncorrected"):
                error_type = getattr(nv, f"NVML_MEMORY_ERROR_TYPE_{kind.upper()}")
                value = self._get(gpu, "nvmlDeviceGetTotalEccErrors", h, error_type, nv.NVML_VOLATILE_ECC)
                setattr(r, f"ecc_{kind}", value)
            if gpu.xid_watched:
                r.xid_errors, r.last_xid = gpu.xid_errors, gpu.last_xid
        except nv.NVMLError_GpuIsLost:
            if not gpu.lost:
                log.warning(
                    "nvml: gpu %d is lost (GpuIsLost); its metrics are absent until it answers again", gpu.index
                )
            gpu.lost = True
            return None
        if gpu.lost:
            log.info("nvml: gpu %d answers again", gpu.index)
            gpu.lost = False
        return r

    def _clock_event_reasons(self, gpu: GpuState) -> int | None:
        nv = self._nvml
        if hasattr(nv, _REASONS_FN) and (_REASONS_FN, gpu.index) not in self._unsupported:
            return self._get(gpu, _REASONS_FN, gpu.handle)
        return self._get(gpu, _REASONS_FN_OLD, gpu.handle)

    def _read_nvlinks(self, gpu: GpuState) -> list[NvLinkReading]:
        """One nvmlDeviceGetFieldValues call for state, speed and traffic of every link; the state of a
        link the field did not answer (older drivers, a sleeping link) comes from nvmlDeviceGetNvLinkState."""
        nv, links = self._nvml, gpu.info.nvlinks
        if not links:
            return []
        readings = {link: NvLinkReading(link=link) for link in links}
        requests = gpu.nvlink_requests
        if requests is None:
            requests = gpu.nvlink_requests = nvlink_field_requests(links, state=gpu.nvlink_state_field)
        values = self._get(gpu, "nvmlDeviceGetFieldValues", gpu.handle, requests)
        state_failed = []
        for fid, ret in apply_nvlink_fields(readings, values if values is not None else ()):
            if fid == FI_NVLINK_GET_STATE:
                state_failed.append(ret)
                continue
            self._log_once(
                ("field", fid, gpu.index),
                logging.INFO,
                "nvml: gpu %d: %s unavailable (%s); left out",
                gpu.index,
                FIELD_NAMES.get(fid, fid),
                nv.NVMLError(ret),
            )
        if gpu.nvlink_state_field and len(state_failed) == len(links):  # a driver without the field
            gpu.nvlink_state_field, gpu.nvlink_requests = False, None
            log.info(
                "nvml: gpu %d: %s unavailable (%s); NVLink state is read link by link",
                gpu.index,
                FIELD_NAMES[FI_NVLINK_GET_STATE],
                nv.NVMLError(state_failed[0]),
            )
        for link, reading in readings.items():
            if reading.up is None:
                state = self._get(gpu, "nvmlDeviceGetNvLinkState", gpu.handle, link)
                reading.up = None if state is None else state == nv.NVML_FEATURE_ENABLED
        return list(readings.values())

    def _read_gpm(self, gpu: GpuState, r: GpuReading) -> None:
        """DRAM bandwidth and PCIe traffic from one nvmlGpmMetricsGet over the previous collection's GPM
        sample and a fresh one (nothing on the first collection). PCIe comes in MiB/s averaged over the
        whole interval; a metric the GPU does not answer is left None (PCIe then uses the sampling call)."""
        nv, gpm = self._nvml, gpu.gpm
        if self._call(gpu, "nvmlGpmSampleGet", gpu.handle, gpm.samples[1]) is _MISSING:
            if ("nvmlGpmSampleGet", gpu.index) in self._unsupported:  # fall back to the proxy from now on
                self._free_samples(gpu, gpm.samples)
                gpu.gpm, gpu.info.gpm = None, False
            return
        if gpm.have_previous:
            req, metrics = gpm.request, gpm.request.metrics
            req.version, req.numMetrics = nv.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRICS)
            req.sample1, req.sample2 = gpm.samples[0], gpm.samples[1]
            for i, metric_id in enumerate(GPM_METRICS):
                metrics[i].metricId = metric_id
            if self._call(gpu, "nvmlGpmMetricsGet", req) is not _MISSING:
                values = [
                    float(metrics[i].value) if metrics[i].nvmlReturn == 0 else None for i in range(len(GPM_METRICS))
                ]
                r.gpm_dram_bw_util_pct = values[0]
                if values[1] is not None and values[2] is not None:
                    r.pcie_tx_kb_s, r.pcie_rx_kb_s = values[1] * 1024, values[2] * 1024  # MiB/s -> KiB/s
        gpm.samples.reverse()
        gpm.have_previous = True

    # -- NVML calls with the unsupported/lost rules ----------------------------------------------------

    def _call(self, gpu: GpuState, fn: str, *args: Any) -> Any:
        """Call NVML; `_MISSING` when it could not answer. GpuIsLost propagates."""
        nv, key = self._nvml, (fn, gpu.index)
        if key in self._unsupported:
            return _MISSING
        try:
            return getattr(nv, fn)(*args)
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as exc:
            if type(exc).__name__ in _UNSUPPORTED:
                self._unsupported.add(key)
                log.info("nvml: gpu %d: %s not supported (%s); its metrics are left out", gpu.index, fn, exc)
            else:
                self._log_once(
                    (fn, gpu.index, type(exc)), logging.WARNING, "nvml: gpu %d: %s failed (%s)", gpu.index, fn, exc
                )
            return _MISSING

    def _get(self, gpu: GpuState, fn: str, *args: Any) -> Any:
        value = self._call(gpu, fn, *args)
        return None if value is _MISSING else value

    def _log_once(self, key: tuple, level: int, msg: str, *args: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, msg, *args)

    # -- start, static info, events, close -----------------------------------------------------------------

    def _start(self) -> None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise CollectorUnavailable(
                    f"nvml: no NVIDIA driver (pynvml not importable: {exc}); GPU collector off"
                ) from None
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except (nv.NVMLError, OSError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise CollectorUnavailable(f"nvml: no NVIDIA driver ({reason}); GPU collector off") from None
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self._shutdown()
            raise CollectorUnavailable(
                f"nvml: no NVIDIA driver (nvmlDeviceGetCount: {exc}); GPU collector off"
            ) from None
        wanted = range(count) if self.config.gpus is None else self.config.gpus
        missing = sorted(set(wanted) - set(range(count)))
        if missing:
            log.warning("nvml: configured gpus %s do not exist (this host has %d); skipped", missing, count)
        self._gpus = [GpuState(index=i) for i in sorted(set(wanted) & set(range(count)))]
        if not self._gpus:
            self._shutdown()
            raise CollectorUnavailable(f"nvml: no NVIDIA GPU to read (driver sees {count}); GPU collector off")
        self._event_set = create_event_set(nv)
        self._started = True

    def _ensure_info(self, gpu: GpuState) -> bool:
        """Get the handle and the static info once (retried next collection if NVML could not)."""
        nv = self._nvml
        if gpu.handle is None:
            try:
                gpu.handle = nv.nvmlDeviceGetHandleByIndex(gpu.index)
            except nv.NVMLError_GpuIsLost:
                raise
            except nv.NVMLError as exc:
                self._log_once(("handle", gpu.index), logging.WARNING, "nvml: gpu %d: no handle (%s)", gpu.index, exc)
                return False
            self._by_handle[handle_key(gpu.handle)] = gpu
        if gpu.info is not None:
            return True
        h = gpu.handle
        uuid = text(self._get(gpu, "nvmlDeviceGetUUID", h)) or "unknown"
        model = text(self._get(gpu, "nvmlDeviceGetName", h)) or "unknown"
        info = GpuInfo(index=gpu.index, uuid=uuid, model=model, nvlinks=self._existing_nvlinks(gpu))
        if self._event_set is not None and not gpu.xid_watched:
            xid = nv.nvmlEventTypeXidCriticalError
            gpu.xid_watched = self._call(gpu, "nvmlDeviceRegisterEvents", h, xid, self._event_set) is not _MISSING
        if self.config.gpm and hasattr(nv, "nvmlGpmQueryDeviceSupport") and gpu.gpm is None:
            self._start_gpm(gpu)
        info.gpm = gpu.gpm is not None
        gpu.info = info  # last: a GPU lost half-way through starts over next collection
        return True

    def _refresh_info(self, gpu: GpuState) -> None:
        """Fill the static values still unknown (each unsupported call is skipped by `_call`)."""
        nv, info, h = self._nvml, gpu.info, gpu.handle
        if info.sm_clock_max_mhz is None:
            info.sm_clock_max_mhz = self._get(gpu, "nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_SM)
        if info.slowdown_temperature_c is None:
            info.slowdown_temperature_c = self._get(
                gpu, "nvmlDeviceGetTemperatureThreshold", h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            )
        if info.pcie_gen_max is None:
            info.pcie_gen_max = self._get(gpu, "nvmlDeviceGetMaxPcieLinkGeneration", h)
        if info.pcie_width_max is None:
            info.pcie_width_max = self._get(gpu, "nvmlDeviceGetMaxPcieLinkWidth", h)

    def _existing_nvlinks(self, gpu: GpuState) -> tuple[int, ...]:
        """Links for which nvmlDeviceGetNvLinkState answers (a down link answers DISABLED, it exists)."""
        nv = self._nvml
        if not self.config.nvlink:
            return ()
        links = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                nv.nvmlDeviceGetNvLinkState(gpu.handle, link)
            except nv.NVMLError_GpuIsLost:
                raise
            except nv.NVMLError:
                continue
            links.append(link)
        if not links:
            log.info("nvml: gpu %d: nvmlDeviceGetNvLinkState not supported on any link; no NVLink metrics", gpu.index)
        return tuple(links)

    def _start_gpm(self, gpu: GpuState) -> None:
        nv = self._nvml
        support = self._get(gpu, "nvmlGpmQueryDeviceSupport", gpu.handle)
        if support is None or not support.isSupportedDevice:
            if support is not None:
                log.info("nvml: gpu %d: GPM not supported; DRAM bandwidth uses memory busy time", gpu.index)
            return
        samples = [self._get(gpu, "nvmlGpmSampleAlloc"), self._get(gpu, "nvmlGpmSampleAlloc")]
        if None in samples:
            self._free_samples(gpu, [s for s in samples if s is not None])
            return
        gpu.gpm = GpmBuffers(samples=samples, request=nv.c_nvmlGpmMetricsGet_t())

    def _free_samples(self, gpu: GpuState, samples: list[Any]) -> None:
        for sample in samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError as exc:
                log.debug("nvml: gpu %d: nvmlGpmSampleFree failed (%s)", gpu.index, exc)

    def _close(self) -> None:
        with self._lock:
            if not self._started:
                return
            nv = self._nvml
            for gpu in self._gpus:
                if gpu.gpm is not None:
                    self._free_samples(gpu, gpu.gpm.samples)
            if self._event_set is not None:
                free_event_set(nv, self._event_set)
            self._shutdown()
            self._gpus, self._by_handle, self._event_set, self._started = [], {}, None, False

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvml: nvmlShutdown failed (%s)", exc)
