"""How long the offline tools take, against their targets: `tailhound rules test` on the pack's own tests
(what a pre-commit hook runs; target < 60 s) and the capacity recommendation from the telemetry of two
simulated slow vLLM nodes over 7 hours (simulation + analysis; target < 20 s).

The tests assert what these tools find; how fast they find it is measured here, where a loaded CI worker
cannot fail it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"rules test (the pack)": 60.0, "capacity from telemetry": 20.0}
NINE_UTC = 1_767_225_600.0 + 9 * 3600  # 2026-01-01 09:00 UTC, as tests/capacity/test_telemetry.py


def rules_test_s() -> float:
    """Wall time of `tailhound rules test rules/tests/*.yaml` in a fresh interpreter."""
    files = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "rules" / "tests").glob("*.yaml"))]
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tailhound", "rules", "test", *files], cwd=ROOT, capture_output=True, check=True
    )
    return time.perf_counter() - t0


def capacity_s(minutes: int = 420) -> float:
    """Simulating two slow-node vLLM engines for `minutes` and recommending from their telemetry."""
    from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
    from tailhound.agents.simulator.recording import iter_records
    from tailhound.capacity.telemetry import recommend_from_telemetry

    t0 = time.perf_counter()
    sim = FleetSimulator(
        SimConfig(nodes=2, sources=("vllm",), start_ts=NINE_UTC, seed=3), [FaultSpec("slow-node", 0, node="*")]
    )
    recommend_from_telemetry(list(iter_records(sim, minutes)), source="telemetry:slow.jsonl")
    return time.perf_counter() - t0


def run(reps: int = 3, minutes: int = 420) -> dict[str, list[float]]:
    return {
        "rules test (the pack)": [rules_test_s() for _ in range(reps)],
        "capacity from telemetry": [capacity_s(minutes) for _ in range(reps)],
    }


def report(result: dict[str, list[float]]) -> str:
    lines = ["| tool | median s | target s | met |", "|---|---:|---:|---|"]
    for name, samples in result.items():
        median = sorted(samples)[len(samples) // 2]
        target = TARGETS_S[name]
        lines.append(f"| {name} | {median:.1f} | {target:.0f} | {'yes' if median < target else 'no'} |")
    return "\n".join(lines)
