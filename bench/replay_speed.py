"""Offline replay speed: ``tailhound replay`` of a simulated fleet recording with the default rule pack.

Method: the recording is written once per run with the simulator's recorder (what
``tailhound simulate --record FILE`` writes): 4 nodes, 55 minutes at 15 s, vllm + dcgm + node +
blackbox, one thermal-throttle fault (the first node, GPUs 3 and 5, from minute 20 for 15 minutes).
Each repetition calls :func:`tailhound.streams.replay.replay_files` with the rules loaded once and writes the
incident events to a file, as ``tailhound replay --out`` does; replay is single-threaded, and the
process is pinned to one CPU while it runs. Wall time (``perf_counter``) and CPU time
(``process_time``) are taken around the call; medians of `reps`. Each run must detect the fault
(an opened ``gpu-thermal-throttle`` incident), so a fast run that found nothing does not count.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.streams.replay import replay_files
from tailhound.streams.ruleset.rulefile import load_rules

RULES = Path(__file__).resolve().parent.parent / "rules"
FAULT = "thermal-throttle@20m+15m"
TARGET_S = 15.0


def write_fleet_recording(path: Path, minutes: float = 55, nodes: int = 4) -> int:
    sim = FleetSimulator(SimConfig(nodes=nodes, interval_s=15.0), [FaultSpec.parse(FAULT)])
    return write_recording(sim, minutes, path)


@contextlib.contextmanager
def one_cpu() -> Iterator[int | None]:
    """Pin this process to one of the CPUs it may use (the last); restores the affinity afterwards."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    cpu = max(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def run(reps: int = 3, minutes: float = 55, nodes: int = 4) -> dict:
    rules = load_rules(RULES)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        recording, out = Path(tmp) / "fleet.jsonl", Path(tmp) / "incidents.jsonl"
        records = write_fleet_recording(recording, minutes, nodes)
        size = recording.stat().st_size
        with one_cpu() as cpu:
            for _ in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                result = replay_files([recording], rules, out)
                wall, cpu_s = time.perf_counter() - t0, time.process_time() - c0
                opened = [e.root_cause for e in result.events if e.event == "opened"]
                if "gpu-thermal-throttle" not in opened:
                    raise RuntimeError(f"replay did not detect the {FAULT} fault (opened: {opened})")
                runs.append(
                    {
                        "wall_s": wall,
                        "cpu_s": cpu_s,
                        "snapshots": result.snapshots,
                        "events": len(result.events),
                        "opened": opened,
                    }
                )
    return {
        "records": records,
        "bytes": size,
        "minutes": minutes,
        "nodes": nodes,
        "cpu": cpu,
        "reps": reps,
        "runs": runs,
    }


def report(result: dict) -> str:
    runs = result["runs"]
    wall = statistics.median(r["wall_s"] for r in runs)
    cpu_s = statistics.median(r["cpu_s"] for r in runs)
    snapshots = runs[0]["snapshots"]
    opened = ", ".join(sorted(set(runs[0]["opened"])))
    each = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
    lines = [
        "| recording | records | snapshots/s | wall (s) | CPU (s) | runs, wall (s) | incident events |",
        "|---|---:|---:|---:|---:|---|---|",
        f"| {result['nodes']} nodes x {result['minutes']:g} min at 15 s, {result['bytes'] / 1e6:.0f} MB "
        f"| {result['records']:,} | {snapshots / wall:,.0f} | **{wall:.2f}** | {cpu_s:.2f} "
        f"| {each} | {runs[0]['events']} (opened: {opened}) |",
        "",
        f"Median of {result['reps']}, pinned to CPU {result['cpu']}; target < {TARGET_S:g} s: "
        f"{'met' if wall < TARGET_S else 'not met'}.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
