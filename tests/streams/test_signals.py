from __future__ import annotations

from tailhound.streams.signals import decode_clock_event_reasons, extract
from tests.factories import dcgm_snapshot


def test_extract_maps_dcgm_names_to_canonical_signals_per_gpu():
    values = extract(dcgm_snapshot(1.0e9, hot={3: (88.0, 990.0)}))
    assert values["gpu.temperature"]["3"] == 88.0
    assert values["gpu.sm_clock"]["3"] == 990.0
    assert values["gpu.sm_clock_ratio"]["3"] == 990.0 / 1980.0
    assert len(values["gpu.temperature"]) == 8


def test_decode_clock_event_reasons():
    assert decode_clock_event_reasons(0x60) == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert decode_clock_event_reasons(0) == []
