"""What the NVML collector recorded on a real NVIDIA H200 (driver 580.159, pass-through, no NVLink
bridges), read back through the streams' signal catalog and the default rules.

``fixtures/h200_nvml_recording.jsonl`` is ``python -m bench.nvml_real`` output, unedited: 6 collections
idle, 6 during a 4 GiB device-to-device copy loop (memory-bound), 6 during bf16 8192^3 matmuls
(compute-bound, power-capped at 700 W). BENCHMARKS.md, "NVML collector on a real GPU", has the rest.
"""

from __future__ import annotations

from pathlib import Path

from agents.exposition import parse_exposition, to_samples
from streams.replay import replay_files
from streams.ruleset import load_rules
from streams.signals import extract
from tailhound.recording import read_records
from tailhound.snapshot import Snapshot

RECORDING = Path(__file__).parent / "fixtures" / "h200_nvml_recording.jsonl"
RULES = Path(__file__).parents[2] / "rules"


def _signals() -> list[dict]:
    out = []
    for rec in read_records(RECORDING):
        snap = Snapshot(ts=rec.ts, node=rec.node, source="nvml", samples=to_samples(parse_exposition(rec.body)))
        out.append({name: values.get("0") for name, values in extract(snap).items()})
    return out


def test_the_recording_is_three_phases_of_six_collections():
    signals = _signals()
    assert len(signals) == 18
    assert all(s["gpu.util"] == 0 for s in signals[:6])
    assert all(s["gpu.util"] >= 0.99 for s in signals[6:])


def test_dram_bandwidth_from_gpm_separates_memory_bound_from_compute_bound():
    """The playbook's "DRAM bandwidth > 85%" holds for a saturating copy on real hardware (GPM reads ~88%),
    while busy SMs on a matmul read ~17%: the rule's threshold is reachable and not met by compute."""
    signals = _signals()
    assert signals[0].get("gpu.dram_bw_util") is None  # GPM needs two samples
    memory, compute = signals[7:12], signals[13:18]
    assert all(0.85 < s["gpu.dram_bw_util"] < 0.95 for s in memory)
    assert all(s["gpu.dram_bw_util"] < 0.25 for s in compute)
    assert all(s["gpu.memory_busy"] == 1.0 for s in memory)  # the proxy saturates; GPM does not


def test_pcie_traffic_comes_from_gpm_after_the_first_collection():
    signals = _signals()
    assert all(s["gpu.pcie_tx_rate"] is not None and s["gpu.pcie_rx_rate"] is not None for s in signals)
    assert all(s["gpu.pcie_link_gen"] == s["gpu.pcie_link_gen_max"] == 5 for s in signals)


def test_power_capped_clocks_are_not_thermal_throttling():
    """Under the matmul the SM clock drops to ~75% of max with only the SW power cap reason set."""
    compute = _signals()[13:18]
    assert all(0.7 < s["gpu.sm_clock_ratio"] < 0.8 for s in compute)
    assert all(s["gpu.power_cap_flag"] == 1 and s["gpu.thermal_throttle_flag"] == 0 for s in compute)
    assert all(s["gpu.power"] > 0.95 * s["gpu.power_limit"] for s in compute)


def test_the_default_rules_open_nothing_on_a_healthy_gpu(tmp_path):
    out = tmp_path / "incidents.jsonl"
    summary = replay_files([RECORDING], load_rules(RULES), out)
    assert out.read_text() == "" and summary.events == [] and summary.snapshots == 18
