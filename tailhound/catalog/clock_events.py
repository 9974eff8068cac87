"""NVML's clock-event (throttle) reason bits, as NVML, nvidia-smi and dcgm-exporter's
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` report them: the collector renders them, rules decode them."""

from __future__ import annotations

#: NVML clock event reason bits (nvmlClocksEventReasons), see shared/reference/nvml_calls.md.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THERMAL_REASONS_MASK = 0x20 | 0x40
