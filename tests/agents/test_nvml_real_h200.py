"""What the NVML collector recorded on a real NVIDIA H200 (driver 580.159, pass-through, no NVLink
bridges), read back through the streams' signal catalog and the default rules.

``fixtures/h200_nvml_recording.jsonl`` is ``python -m bench.nvml_real --phase-s 5 --skip-pcie
--decode-batches 1,16,64,256`` output, unedited: 5 collections, 1 s apart, in each of 7 phases: idle; a
4 GiB device-to-device copy loop (memory-bound); bf16 8192^3 matmuls (compute-bound, power-capped at
700 W); and decode-shaped GEMMs, a batch of 1, 16, 64 or 256 activations times 32 bf16 8192x8192
weights (4 GiB, streamed like a decode step streams its weights). GPM values are over the interval
since the previous collection, so each phase's first collection straddles two loads and is left out.
BENCHMARKS.md, "NVML collector on a real GPU", has the rest.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tailhound.agents.exposition import parse_exposition, to_samples
from tailhound.recording import read_records
from tailhound.snapshot import Snapshot
from tailhound.streams.extract import extract
from tailhound.streams.replay import replay_files
from tailhound.streams.ruleset.rulefile import load_rules

RECORDING = Path(__file__).parent / "fixtures" / "h200_nvml_recording.jsonl"
RULES = Path(__file__).parents[2] / "rules"
PHASES = ("idle", "copy", "matmul", "decode1", "decode16", "decode64", "decode256")


def _phases() -> dict[str, list[dict]]:
    """Signal values of GPU 0 per phase, without each phase's first (straddling) collection."""
    signals = []
    for rec in read_records(RECORDING):
        snap = Snapshot(ts=rec.ts, node=rec.node, source="nvml", samples=to_samples(parse_exposition(rec.body)))
        signals.append({name: values.get("0") for name, values in extract(snap).items()})
    assert len(signals) == 5 * len(PHASES)
    return {name: signals[5 * i + 1 : 5 * i + 5] for i, name in enumerate(PHASES)}


def _dram(phase: list[dict]) -> list[float]:
    return [s["gpu.dram_bw_util"] for s in phase]


def test_every_phase_ran_with_the_gpu_busy_or_idle_as_planned():
    phases = _phases()
    assert all(s["gpu.util"] == 0 for s in phases["idle"])
    assert all(s["gpu.util"] >= 0.99 for name in PHASES[1:] for s in phases[name])


def test_dram_bandwidth_from_gpm_separates_memory_bound_from_compute_bound():
    """On the peak-bandwidth scale a pure copy reads ~0.886 and decode-shaped work 0.79-0.82, compute
    bound work 0.17-0.51; the default rules' 0.75 lies between (the playbook's 85-90% never would)."""
    phases = _phases()
    assert all(0.88 < d < 0.89 for d in _dram(phases["copy"]))
    for name in ("decode1", "decode16", "decode64"):
        assert all(0.78 < d < 0.83 for d in _dram(phases[name])), name
    assert all(d < 0.55 for name in ("matmul", "decode256") for d in _dram(phases[name]))
    assert all(s["gpu.memory_busy"] == 1.0 for name in ("copy", "decode1", "decode64") for s in phases[name])


def test_the_default_bandwidth_threshold_sits_between_decode_and_compute():
    thresholds = {
        rule["name"]: cond["above"]
        for group in yaml.safe_load((RULES / "engine.yaml").read_text())["groups"]
        for rule in group["rules"]
        for cond in rule["when"].get("all", [])
        if isinstance(cond, dict) and cond.get("signal") == "gpu.dram_bw_util"
    }
    assert set(thresholds) == {"tail-latency-bandwidth-bound", "queue-wait-scale-out"}
    phases = _phases()
    decode = min(min(_dram(phases[name])) for name in ("decode1", "decode16", "decode64"))
    compute = max(max(_dram(phases[name])) for name in ("matmul", "decode256"))
    assert all(compute < t < decode for t in thresholds.values())


def test_pcie_traffic_and_link_state_are_there_in_every_collection():
    phases = _phases()
    assert all(
        s["gpu.pcie_tx_rate"] is not None and s["gpu.pcie_rx_rate"] is not None
        for phase in phases.values()
        for s in phase
    )
    assert all(s["gpu.pcie_link_gen"] == s["gpu.pcie_link_gen_max"] == 5 for phase in phases.values() for s in phase)


def test_power_capped_clocks_are_not_thermal_throttling():
    """Under the matmul the SM clock drops to ~75% of max with only the SW power cap reason set."""
    matmul = _phases()["matmul"]
    assert all(0.7 < s["gpu.sm_clock_ratio"] < 0.8 for s in matmul)
    assert all(s["gpu.power_cap_flag"] == 1 and s["gpu.thermal_throttle_flag"] == 0 for s in matmul)
    assert all(s["gpu.power"] > 0.95 * s["gpu.power_limit"] for s in matmul)


def test_the_default_rules_open_nothing_on_a_healthy_gpu(tmp_path):
    out = tmp_path / "incidents.jsonl"
    summary = replay_files([RECORDING], load_rules(RULES), out)
    assert out.read_text() == "" and summary.events == [] and summary.snapshots == 5 * len(PHASES)
