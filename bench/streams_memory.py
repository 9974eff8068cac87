"""Memory of the streams state: per series (rolling baselines, latency windows) and per node.

Method:
- rolling baselines: :func:`tailhound.streams.baseline.bench_memory` (a full 4 h ring of 5-minute medians plus
  a full current bucket at a 10 s cadence, the largest usual state; in memory by tracemalloc as
  ``RollingBaseline`` objects in a ``BaselineStore``, and serialised as compact JSON). The evaluator
  keeps baselines in ``NodeState.baselines`` as the JSON dicts the table stores, so that form is
  measured too: `n` dicts parsed from the same state (``json.loads``, fresh objects each, keyed
  ``signal|entity`` as in NodeState), tracemalloc over what stays allocated;
- latency windows: one :class:`tailhound.streams.latency_window.LatencyWindow` (the tracker's defaults: 300 s, at
  most 64 intervals) fed with a simulated node's vLLM TTFT histogram deltas at 15 s until the window is
  full (20 intervals, from the agent's pipeline); `n` copies restored from its JSON (fresh objects each)
  as ``LatencyWindow`` objects, and as the JSON dicts ``NodeState.latency`` holds; serialised bytes;
- one node: a simulated node (vllm + dcgm + node + blackbox at 15 s, no fault) for an hour through
  :class:`tailhound.streams.processor.SnapshotProcessor` with the default rules; the state the table stores for
  it, serialised with Faust's ``json`` codec (what each changelog message carries), in memory as the
  dict the memory store holds (tracemalloc of a fresh parse), and by part. What the worker holds per
  node in all (that dict plus the processor's in-memory latest values and latency trackers) is the
  tracemalloc difference between feeding the same hour for 3 nodes and for 1, halved; snapshots are
  built before tracing and one-time caches are warmed first, so neither counts. "State series" are the
  entries that grow with the fleet: baselines, histories and latency windows; "exported series" are
  the samples of one collection of the node's four sources.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable

from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.streams.baseline import _warm_template, bench_memory
from tailhound.streams.latency_window import LatencyWindow
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules

from .replay_speed import RULES

TARGET_BASELINE_B = 1024
TTFT = "vllm:time_to_first_token_seconds"


def compact(obj: object) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def retained_bytes(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes that stay allocated after `build()` (tracemalloc, current not peak), and its result."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        obj = build()
        return tracemalloc.get_traced_memory()[0] - before, obj
    finally:
        tracemalloc.stop()


def ttft_window() -> LatencyWindow:
    """A full 5-minute window of one simulated engine's TTFT deltas at 15 s."""
    sim = FleetSimulator(SimConfig(nodes=1, sources=("vllm",), interval_s=15.0))
    builder, window = SnapshotBuilder(), LatencyWindow()
    for rec in iter_records(sim, minutes=8):
        snap = builder.build(rec)
        for s in snap.samples:
            if s.name == TTFT and s.kind == "histogram" and s.delta is not None:
                window.add(snap.ts, snap.prev_ts, s.delta, s.le, gap=snap.gap)
    return window


def per_series(n: int) -> list[dict]:
    rows = []
    base = bench_memory(n)
    rows.append(
        {
            "state": "rolling baseline: RollingBaseline in BaselineStore (bench_memory)",
            "n": n,
            "memory": base["in_memory_bytes_per_series"],
            "json": base["serialized_bytes_per_series"],
        }
    )
    text = json.dumps(_warm_template(), separators=(",", ":"))  # the state bench_memory stores
    used, _ = retained_bytes(lambda: {f"latency.tpot.p95|engine-{i}": json.loads(text) for i in range(n)})
    rows.append(
        {"state": "rolling baseline as NodeState holds it (JSON dict)", "n": n, "memory": used / n, "json": len(text)}
    )
    window = ttft_window()
    text = json.dumps(window.to_dict(), separators=(",", ":"))
    used, _ = retained_bytes(lambda: [LatencyWindow.from_dict(json.loads(text)) for _ in range(n)])
    rows.append(
        {
            "state": f"latency window: LatencyWindow, {len(window.intervals)} intervals of TTFT",
            "n": n,
            "memory": used / n,
            "json": len(text),
        }
    )
    used, _ = retained_bytes(lambda: [json.loads(text) for _ in range(n)])
    rows.append(
        {"state": "latency window as NodeState holds it (JSON dict)", "n": n, "memory": used / n, "json": len(text)}
    )
    return rows


def node_state(minutes: float = 60, nodes: int = 3) -> dict:
    """A simulated node through the processor for `minutes`: its stored state, sized; and what the
    worker holds per node in memory (the slope between feeding 1 and `nodes` nodes)."""
    from faust.serializers import codecs

    sim = FleetSimulator(SimConfig(nodes=nodes, interval_s=15.0))
    builder, rules, first = SnapshotBuilder(), load_rules(RULES), sim.node_names[0]
    snapshots = [builder.build(rec) for rec in iter_records(sim, minutes)]
    exported = {s.source: len(s.samples) for s in snapshots if s.node == first}

    def feed(only: str | None) -> tuple[SnapshotProcessor, MemoryStateStore]:
        processor, store = SnapshotProcessor(rules), MemoryStateStore()
        for snap in snapshots:
            if only is None or snap.node == only:
                step = processor.step(store.get(snap.node), snap)
                if step.changed:
                    store[snap.node] = step.state
        return processor, store

    feed(first)  # one-time caches (catalog, rule facts) are allocated here, outside the measurements
    one, (_, store) = retained_bytes(lambda: feed(first))
    many, _ = retained_bytes(lambda: feed(None))
    stored = store.get(first)
    assert stored is not None
    state = dict(stored)  # (the record decoded: the table keeps it packed)
    text = codecs.dumps("json", state)
    memory, _ = retained_bytes(lambda: json.loads(text))
    latency = (state.get("latency") or {}).get("series", [])
    parts = {
        "baselines": (len(state["baselines"]), compact(state["baselines"])),
        "latency windows": (len(latency), compact(state.get("latency"))),
        "histories": (len(state["history"]), compact(state["history"])),
    }
    rest = {k: v for k, v in state.items() if k not in ("baselines", "latency", "history")}
    parts["rules, incidents, last_ts, models"] = (None, compact(rest))
    return {
        "minutes": minutes,
        "bytes": len(text),
        "memory": memory,
        "worker": (many - one) / (nodes - 1),
        "worker_one": one,
        "nodes": nodes,
        "parts": parts,
        "state_series": sum(n for n, _ in parts.values() if n),
        "exported": sum(exported.values()),
        "exported_by_source": exported,
    }


def run(sizes: tuple[int, ...] = (10_000, 100_000), minutes: float = 60) -> dict:
    return {"series": [row for n in sizes for row in per_series(n)], "node": node_state(minutes)}


def report(result: dict) -> str:
    lines = ["| state | series | in memory (B/series) | serialised JSON (B/series) |", "|---|---:|---:|---:|"]
    for r in result["series"]:
        lines.append(f"| {r['state']} | {r['n']:,} | {r['memory']:,.0f} | {r['json']:,.0f} |")
    lines += ["", "Baselines, target <= 1 KB per series (largest size measured):"]
    baselines = [r for r in result["series"] if r["state"].startswith("rolling baseline")]
    for what, form, key in (
        ("RollingBaseline objects, in memory", "RollingBaseline", "memory"),
        ("JSON dicts as NodeState holds them, in memory", "JSON dict", "memory"),
        ("serialised (changelog)", "", "json"),
    ):
        worst = max(r[key] for r in baselines if form in r["state"])
        lines.append(f"- {what}: {worst:,.0f} B: {'met' if worst <= TARGET_BASELINE_B else '**not met**'}")
    lines.append("")
    node = result["node"]
    by_source = ", ".join(f"{k} {v}" for k, v in node["exported_by_source"].items())
    lines += [
        f"One node after {node['minutes']:g} minutes (exported series per collection: {by_source}):",
        "",
        "| part of NodeState | entries | serialised JSON (B) | per entry (B) |",
        "|---|---:|---:|---:|",
    ]
    for name, (n, size) in node["parts"].items():
        lines.append(
            f"| {name} | {n if n is not None else '-'} | {size:,} | {size / n:,.0f} |"
            if n
            else f"| {name} | {n if n is not None else '-'} | {size:,} | - |"
        )
    lines += [
        f"| **whole node (Faust json codec, one changelog value)** | {node['state_series']} state series "
        f"| **{node['bytes']:,}** | {node['bytes'] / node['state_series']:,.0f} per state series, "
        f"{node['bytes'] / node['exported']:,.0f} per exported series ({node['exported']}) |",
        "",
        f"In memory (tracemalloc): the dict the table holds, {node['memory']:,} B per node; the whole "
        f"evaluator (table dict + the processor's in-memory latest values and latency trackers), "
        f"{node['worker']:,.0f} B per node (slope from 1 to {node['nodes']} nodes; "
        f"{node['worker_one']:,} B with one node).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
