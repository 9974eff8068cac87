"""DCGM-like state of one GPU: temperature dynamics, clocks and throttle reasons, load gauges.

A tick runs in two halves: :meth:`GpuState.update_thermal` (temperature from the previous tick's
power, then the clock the thermal state allows; the engine reads :attr:`GpuState.perf_clock`) and,
after the engine step, :meth:`GpuState.update_load` (utilisation, power, DRAM, NVLink, PCIe).
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid

from tailhound.snapshot import CounterSample, GaugeSample, Sample

from .dcgm_fields import DRIVER_VERSION
from .faults import NVLINK_BANDWIDTH_FACTOR

GPU_MODEL_NAME = "NVIDIA H100 80GB HBM3"
MAX_SM_CLOCK_MHZ = 1980.0
MEM_CLOCK_MHZ = 2619.0
IDLE_SM_CLOCK_MHZ = 345.0
THROTTLED_SM_CLOCK_MHZ = 1100.0  # ~55 % of max: HW thermal slowdown
SW_THERMAL_SM_CLOCK_MHZ = 1650.0
SLOWDOWN_TEMP_C = 85.0
FB_TOTAL_MIB = 81559.0
FB_RESERVED_MIB = 522.0
FB_USED_MIB = 73410.0  # vLLM pre-allocates gpu_memory_utilization=0.9
NVLINK_LINKS = 18
NVLINK_BYTES_PER_TOKEN = 4.6e6  # TP8 all-reduce traffic per token and GPU (70B, bf16)
INLET_TEMP_C = 28.0
THERMAL_RESISTANCE_C_PER_W = 0.065
IDLE_POWER_W, DYNAMIC_POWER_W, POWER_CAP_W = 80.0, 600.0, 700.0
#: How a clock lowered by the power limit slows the engine: (max / clock) ** this (thermal clocks: 0.9).
#: Decode streams weights from HBM, whose clock the power limit leaves alone: H100s capped 15-30 % below
#: their TDP lose a few percent of LLM decode throughput.
POWER_CAP_CLOCK_EXPONENT = 0.35
#: Thermal time constants (s): heating under a cooling fault, normal heating, cooling.
TAU_FAULT_S, TAU_HEAT_S, TAU_COOL_S = 35.0, 40.0, 60.0

# NVML clock event reasons (nvmlClocksEventReason*).
REASON_GPU_IDLE = 0x1
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40


def gpu_uuid(node: str, index: int) -> str:
    """A stable, UUID-shaped GPU identifier for (node, index)."""
    return "GPU-" + str(uuid.UUID(bytes=hashlib.md5(f"{node}/gpu{index}".encode()).digest()))


class GpuState:
    """One GPU as dcgm-exporter reports it."""

    def __init__(self, rng: random.Random, node: str, index: int, per_link: bool = False, fields: str = "all") -> None:
        self._rng = rng
        self.index = index
        self.fields = fields
        if fields == "default":  # a stock dcgm-exporter's label set (device, PCI bus id, driver version)
            self.labels = {
                "gpu": str(index),
                "UUID": gpu_uuid(node, index),
                "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                "device": f"nvidia{index}",
                "modelName": GPU_MODEL_NAME,
                "Hostname": node,
                "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
            }
        else:
            self.labels = {
                "gpu": str(index),
                "UUID": gpu_uuid(node, index),
                "modelName": GPU_MODEL_NAME,
                "Hostname": node,
            }
        self.offset_c = rng.uniform(-2.0, 3.0)  # position in the chassis airflow
        self.power_w = IDLE_POWER_W + DYNAMIC_POWER_W * 0.55
        self.temp_c = INLET_TEMP_C + self.offset_c + THERMAL_RESISTANCE_C_PER_W * self.power_w
        self.reported_temp = round(self.temp_c)
        self.perf_clock = MAX_SM_CLOCK_MHZ
        self.sm_clock = MAX_SM_CLOCK_MHZ
        self.reasons = 0
        #: the board power limit (W): the fleet sets it per tick (a power-cap fault lowers it)
        self.power_limit_w = POWER_CAP_W
        self._busy = 0.0  # last tick's activity, for the clock a lowered power limit allows
        self._power_capped = False  # the clock is what the power limit allows (and no thermal slowdown)
        self.util_pct = 0.0
        self.dram_active = 0.0
        self.nvlink_tx = self.nvlink_rx = 0.0
        self.pcie_tx = self.pcie_rx = 0.0
        self.fb_used = FB_USED_MIB
        uptime_s = rng.uniform(2, 30) * 86400.0
        self.energy_mj = uptime_s * 350.0 * 1000.0
        self.pcie_replays = float(rng.randint(0, 3))
        self.last_xid = 0.0  # DCGM_FI_DEV_XID_ERRORS: the code of the last XID (0: none since the reset)
        self.remapped_uncorrectable = 0.0
        self.link_bytes = [uptime_s * rng.uniform(1.5e9, 2.5e9) for _ in range(NVLINK_LINKS)]
        self.per_link = per_link
        lb = self.labels
        self._constant_samples: tuple[Sample, ...] = (
            GaugeSample(name="DCGM_FI_DEV_SLOWDOWN_TEMP", labels=lb, value=SLOWDOWN_TEMP_C),
            GaugeSample(name="DCGM_FI_DEV_MAX_SM_CLOCK", labels=lb, value=MAX_SM_CLOCK_MHZ),
            GaugeSample(name="DCGM_FI_DEV_MEM_CLOCK", labels=lb, value=MEM_CLOCK_MHZ),
            CounterSample(name="DCGM_FI_DEV_PCIE_REPLAY_COUNTER", labels=lb, value=self.pcie_replays),
        )

    @property
    def slowdown(self) -> float:
        """How much slower this GPU computes than at max clock (>= 1)."""
        if self.perf_clock >= MAX_SM_CLOCK_MHZ:
            return 1.0
        # a power-capped clock (no thermal reason) costs memory-bound decode little: the memory clock stays
        exponent = POWER_CAP_CLOCK_EXPONENT if self._power_capped else 0.9
        return (MAX_SM_CLOCK_MHZ / self.perf_clock) ** exponent

    def update_thermal(self, dt: float, utilization: float, overheating: bool, extra_c: float = 0.0) -> None:
        """Temperature follows the last tick's power (or a failing cooler); clocks follow temperature.

        `extra_c` warms the GPU's equilibrium without a fault of the cooling loop (a warm GPU, inlet drift).
        """
        rng = self._rng
        if overheating:
            target, tau = min(90.0, 88.5 + 1.5 * utilization + 0.2 * self.offset_c), TAU_FAULT_S
        else:
            target = INLET_TEMP_C + self.offset_c + THERMAL_RESISTANCE_C_PER_W * self.power_w
            if extra_c:
                target += extra_c
            tau = TAU_HEAT_S if target > self.temp_c else TAU_COOL_S
        self.temp_c += (target - self.temp_c) * (1.0 - math.exp(-dt / tau))
        self.reported_temp = round(self.temp_c + rng.gauss(0.0, 0.3))
        if self.reported_temp >= SLOWDOWN_TEMP_C:
            self.perf_clock = THROTTLED_SM_CLOCK_MHZ + round(rng.gauss(0.0, 12.0))
            self.reasons = REASON_SW_THERMAL | REASON_HW_THERMAL
        elif self.reported_temp >= SLOWDOWN_TEMP_C - 3 and (overheating or self.reasons & REASON_SW_THERMAL):
            self.perf_clock = SW_THERMAL_SM_CLOCK_MHZ + round(rng.gauss(0.0, 15.0))
            self.reasons = REASON_SW_THERMAL
        else:
            self.perf_clock = MAX_SM_CLOCK_MHZ - abs(round(rng.gauss(0.0, 10.0)))
            self.reasons = 0
        self._power_capped = False
        if self.power_limit_w < POWER_CAP_W and self._busy > 0.0:
            # the clock at which last tick's work draws the limit: P = idle + dynamic * busy * ratio**1.3
            ratio = ((self.power_limit_w - 5.0 - IDLE_POWER_W) / (DYNAMIC_POWER_W * self._busy)) ** (1 / 1.3)
            if ratio < self.perf_clock / MAX_SM_CLOCK_MHZ:
                self.perf_clock = round(MAX_SM_CLOCK_MHZ * max(0.4, ratio))
                self.reasons |= REASON_SW_POWER_CAP
                self._power_capped = not self.reasons & (REASON_SW_THERMAL | REASON_HW_THERMAL)

    def set_hardware_error(self, xid: int | None) -> None:
        """A hardware XID while `xid` is set (one row remapped for it, once); None: the GPU was reset."""
        if xid is None:
            self.last_xid = 0.0
            return
        if self.last_xid != xid:
            self.remapped_uncorrectable += 1.0
        self.last_xid = float(xid)

    def update_load(
        self, dt: float, utilization: float, token_rate: float, prompt_tps: float, generation_tps: float,
        dram_saturated: bool, nvlink_degraded: bool, dead_link: int,
    ) -> None:  # fmt: skip
        """Utilisation, power, DRAM and interconnect gauges for the engine's last tick."""
        rng = self._rng
        u = max(0.0, min(1.0, utilization))
        idle = u < 0.02
        self.sm_clock = IDLE_SM_CLOCK_MHZ if idle else self.perf_clock
        reasons = self.reasons | (REASON_GPU_IDLE if idle else 0)
        clock_ratio = self.sm_clock / MAX_SM_CLOCK_MHZ
        busy = 0.0 if idle else 0.25 + 0.7 * u
        self._busy = busy
        power = IDLE_POWER_W + DYNAMIC_POWER_W * busy * clock_ratio**1.3 + rng.gauss(0.0, 4.0)
        if power > self.power_limit_w - 10:
            power = self.power_limit_w - rng.uniform(0.0, 10.0)
            reasons |= REASON_SW_POWER_CAP
        self.power_w = max(IDLE_POWER_W * 0.9, power)
        self.reasons = reasons
        self.energy_mj += self.power_w * dt * 1000.0
        self.util_pct = 0.0 if idle else min(100.0, max(0.0, 100.0 * (0.3 + 0.72 * u) + rng.gauss(0.0, 1.5)))
        # As a fraction of peak bandwidth, measured on a real H200 (GPM DRAM_BW_UTIL, BENCHMARKS.md "NVML
        # collector on a real GPU"): decode-shaped GEMMs streaming their weights read 0.79-0.82, a pure
        # copy 0.886, compute-bound work 0.17-0.51. Saturated decode sits at the first, a healthy engine
        # well below.
        if dram_saturated and not idle:
            self.dram_active = rng.uniform(0.78, 0.84)
        else:
            self.dram_active = 0.0 if idle else max(0.0, 0.2 + 0.35 * u + rng.gauss(0.0, 0.015))
        self.dram_active = min(self.dram_active, 0.99)
        tx = token_rate * NVLINK_BYTES_PER_TOKEN * rng.uniform(0.97, 1.03)
        if nvlink_degraded:
            tx *= NVLINK_BANDWIDTH_FACTOR * rng.uniform(0.85, 1.1)
        self.nvlink_tx = tx
        self.nvlink_rx = tx * rng.uniform(0.98, 1.02)
        moved = (self.nvlink_tx + self.nvlink_rx) * dt
        if nvlink_degraded:
            per_link = moved / (NVLINK_LINKS - 1)
            for link in range(NVLINK_LINKS):
                self.link_bytes[link] += rng.uniform(0.0, 2048.0) if link == dead_link else per_link
        else:
            per_link = moved / NVLINK_LINKS
            for link in range(NVLINK_LINKS):
                self.link_bytes[link] += per_link
        self.pcie_tx = 2.0e7 + generation_tps * 1500.0 * rng.uniform(0.9, 1.1)
        self.pcie_rx = 1.0e7 + prompt_tps * 40.0 * rng.uniform(0.9, 1.1)
        self.fb_used = FB_USED_MIB + rng.randint(0, 24)

    def samples(self) -> list[Sample]:
        """dcgm-exporter gauges and counters of this GPU."""
        if self.fields == "default":
            return self._default_samples()
        lb = self.labels
        g, c = GaugeSample, CounterSample
        mem_temp = float(round(self.temp_c + 4.0 + 4.0 * self.dram_active))
        out: list[Sample] = [
            g(name="DCGM_FI_DEV_GPU_TEMP", labels=lb, value=float(self.reported_temp)),
            g(name="DCGM_FI_DEV_MEMORY_TEMP", labels=lb, value=mem_temp),
            g(name="DCGM_FI_DEV_SM_CLOCK", labels=lb, value=float(self.sm_clock)),
            g(name="DCGM_FI_DEV_CLOCKS_EVENT_REASONS", labels=lb, value=float(self.reasons)),
            g(name="DCGM_FI_DEV_GPU_UTIL", labels=lb, value=float(round(self.util_pct))),
            g(name="DCGM_FI_DEV_MEM_COPY_UTIL", labels=lb, value=float(round(self.dram_active * 85.0))),
            g(name="DCGM_FI_PROF_DRAM_ACTIVE", labels=lb, value=round(self.dram_active, 4)),
            g(name="DCGM_FI_DEV_POWER_USAGE", labels=lb, value=round(self.power_w, 3)),
            g(name="DCGM_FI_DEV_FB_USED", labels=lb, value=float(self.fb_used)),
            g(name="DCGM_FI_DEV_FB_FREE", labels=lb, value=FB_TOTAL_MIB - FB_RESERVED_MIB - self.fb_used),
            c(name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels=lb, value=float(int(self.energy_mj))),
            c(name="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", labels=lb, value=float(int(sum(self.link_bytes)))),
            g(name="DCGM_FI_PROF_NVLINK_TX_BYTES", labels=lb, value=round(self.nvlink_tx, 1)),
            g(name="DCGM_FI_PROF_NVLINK_RX_BYTES", labels=lb, value=round(self.nvlink_rx, 1)),
            g(name="DCGM_FI_PROF_PCIE_TX_BYTES", labels=lb, value=round(self.pcie_tx, 1)),
            g(name="DCGM_FI_PROF_PCIE_RX_BYTES", labels=lb, value=round(self.pcie_rx, 1)),
            g(name="DCGM_FI_DEV_XID_ERRORS", labels=lb, value=self.last_xid),
            c(name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", labels=lb, value=self.remapped_uncorrectable),
        ]
        out.extend(self._constant_samples)  # frozen samples whose value never changes
        if self.per_link:
            for link, value in enumerate(self.link_bytes):
                out.append(c(name=f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}", labels=lb, value=float(int(value))))
        return out

    def _default_samples(self) -> list[Sample]:
        """The fields of dcgm-exporter's default-counters.csv (dcgm_fields.DCGM_DEFAULT_COUNTERS) only: no
        clock-event reasons, no max SM clock, no slowdown temperature, no NVLink throughput gauges."""
        lb = self.labels
        g, c = GaugeSample, CounterSample
        util = self.util_pct / 100.0
        clock_ratio = self.sm_clock / MAX_SM_CLOCK_MHZ
        mem_temp = float(round(self.temp_c + 4.0 + 4.0 * self.dram_active))
        return [
            g(name="DCGM_FI_DEV_SM_CLOCK", labels=lb, value=float(self.sm_clock)),
            g(name="DCGM_FI_DEV_MEM_CLOCK", labels=lb, value=MEM_CLOCK_MHZ),
            g(name="DCGM_FI_DEV_MEMORY_TEMP", labels=lb, value=mem_temp),
            g(name="DCGM_FI_DEV_GPU_TEMP", labels=lb, value=float(self.reported_temp)),
            g(name="DCGM_FI_DEV_POWER_USAGE", labels=lb, value=round(self.power_w, 3)),
            c(name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels=lb, value=float(int(self.energy_mj))),
            c(name="DCGM_FI_DEV_PCIE_REPLAY_COUNTER", labels=lb, value=self.pcie_replays),
            g(name="DCGM_FI_DEV_GPU_UTIL", labels=lb, value=float(round(self.util_pct))),
            g(name="DCGM_FI_DEV_MEM_COPY_UTIL", labels=lb, value=float(round(self.dram_active * 85.0))),
            g(name="DCGM_FI_DEV_ENC_UTIL", labels=lb, value=0.0),
            g(name="DCGM_FI_DEV_DEC_UTIL", labels=lb, value=0.0),
            g(name="DCGM_FI_DEV_XID_ERRORS", labels=lb, value=self.last_xid),
            g(name="DCGM_FI_DEV_FB_FREE", labels=lb, value=FB_TOTAL_MIB - FB_RESERVED_MIB - self.fb_used),
            g(name="DCGM_FI_DEV_FB_USED", labels=lb, value=float(self.fb_used)),
            g(name="DCGM_FI_DEV_FB_RESERVED", labels=lb, value=FB_RESERVED_MIB),
            c(name="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", labels=lb, value=float(int(sum(self.link_bytes)))),
            g(name="DCGM_FI_DEV_VGPU_LICENSE_STATUS", labels=lb, value=0.0),
            c(name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", labels=lb, value=self.remapped_uncorrectable),
            c(name="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", labels=lb, value=0.0),
            g(name="DCGM_FI_DEV_ROW_REMAP_FAILURE", labels=lb, value=0.0),
            g(name="DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels=lb, value=round(min(1.0, 0.98 * util), 4)),
            g(name="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", labels=lb, value=round(0.32 * util * clock_ratio, 4)),
            g(name="DCGM_FI_PROF_DRAM_ACTIVE", labels=lb, value=round(self.dram_active, 4)),
            g(name="DCGM_FI_PROF_PCIE_TX_BYTES", labels=lb, value=round(self.pcie_tx, 1)),
            g(name="DCGM_FI_PROF_PCIE_RX_BYTES", labels=lb, value=round(self.pcie_rx, 1)),
        ]
