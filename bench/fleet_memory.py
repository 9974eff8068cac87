"""Memory per node and per model of the worker's fleet state, with and without the caps (streams.max_nodes,
streams.max_models; tailhound.streams.fleet_cap).

Method: a simulated node (vllm + dcgm + node + blackbox at 15 s, FleetSimulator, one minute so counters and
histograms have deltas) gives one snapshot per source; `n` node names each send that set once, renamed
("realistic": a whole GPU node per name), or only its ``node`` snapshot (9 samples: "attack", what the
100k-names attack sends: every name is new and small). Each snapshot goes through the worker's own step as the
``evaluate`` agent runs it: :meth:`SnapshotProcessor.admit` (evictions over the cap, each resolved with
:meth:`SnapshotProcessor.evict` and deleted from the table), then :meth:`SnapshotProcessor.step`, the state
stored in a :class:`MemoryStateStore` (Faust's memory store holds the same dicts). Measured after a full
collection: the process's RSS growth (``/proc/self/statm``) and, for the smaller sizes, tracemalloc's retained
bytes, both divided by the nodes held at the end. Models: `m` model names each feed one engine snapshot per
15 s bucket for three buckets through :class:`ModelStage` (the default model rules), the same way.
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from pathlib import Path

from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.snapshot import Snapshot
from tailhound.streams.model_stage import ModelStage, split_rules
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import RuleSet, load_rules

RULES = Path(__file__).resolve().parents[1] / "rules"
#: above this many nodes tracemalloc is left out (it slows the step ~5x and adds its own memory)
TRACE_UP_TO = 2_000


def rss() -> int:
    """Resident set size of this process, bytes."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def node_template() -> list[Snapshot]:
    """The last snapshot of each source of one simulated node after a minute (with deltas)."""
    builder = SnapshotBuilder()
    last: dict[str, Snapshot] = {}
    for rec in iter_records(FleetSimulator(SimConfig(nodes=1, interval_s=15.0)), 1):
        snap = builder.build(rec)
        last[snap.source] = snap
    return list(last.values())


def feed_nodes(rules: RuleSet, template: list[Snapshot], n: int, cap: int | None) -> dict:
    """`n` new node names through the worker's step; what stays held."""
    processor, store = SnapshotProcessor(rules, max_nodes=cap), MemoryStateStore()
    evicted = 0
    started = time.perf_counter()
    for i in range(n):
        name = f"made-up-{i:06d}"
        for snap in template:
            snap = snap.model_copy(update={"node": name})
            for gone in processor.admit(name, 0):
                processor.evict(gone, store.get(gone), snap.ts)
                del store[gone]
                evicted += 1
            step = processor.step(store.get(name), snap)
            if step.changed:
                store[name] = step.state
    return {"processor": processor, "store": store, "evicted": evicted, "seconds": time.perf_counter() - started}


def measure(trace: bool, what, *args) -> tuple[dict, int, int | None]:
    """(result, RSS growth, tracemalloc retained when `trace`, else None) of `what(*args)`, after full
    collections."""
    gc.collect()
    before = rss()
    if trace:
        tracemalloc.start()
        t0 = tracemalloc.get_traced_memory()[0]
    result = what(*args)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - t0 if trace else None
    if trace:
        tracemalloc.stop()
    return result, rss() - before, traced


def nodes_rows(sizes: tuple[int, ...], cap: int, kind: str = "realistic") -> list[dict]:
    rules, _ = split_rules(load_rules(RULES))
    template = node_template()
    if kind == "attack":
        template = [s for s in template if s.source == "node"]
    feed_nodes(rules, template, 3, None)  # one-time caches (catalog, rule facts) outside the measurements
    rows = []
    for n in sizes:
        for c in (None, cap):
            if c is not None and c >= n:
                continue
            result, grown, traced = measure(n <= TRACE_UP_TO, feed_nodes, rules, template, n, c)
            held = len(result["store"])
            rows.append(
                {
                    "kind": kind,
                    "names": n,
                    "cap": c,
                    "held": held,
                    "evicted": result["evicted"],
                    "rss": grown,
                    "traced": traced,
                    "seconds": result["seconds"],
                    "snapshots": n * len(template),
                }
            )
            del result
    return rows


def engine(model: str, ts: float, node: str = "gpu-node-1") -> Snapshot:
    from tailhound.snapshot import CounterSample, GaugeSample

    labels = {"engine": "0", "model_name": model}
    return Snapshot(
        ts=ts,
        node=node,
        source="vllm",
        interval_s=15,
        prev_ts=ts - 15,
        labels={"instance": node},
        samples=[
            CounterSample(name="vllm:generation_tokens_total", labels=labels, value=100, delta=100),
            GaugeSample(name="vllm:num_requests_waiting", labels=labels, value=9.0),
        ],
    )


def feed_models(rules: RuleSet, m: int, cap: int | None) -> dict:
    stage, store = ModelStage(rules, max_models=cap), MemoryStateStore()
    t0 = 1_767_225_600.0
    started = time.perf_counter()
    for b in range(3):
        for i in range(m):
            name = f"made-up/model-{i:05d}"
            stage.add(name, engine(name, t0 + 15 * b), store=store)
    return {"stage": stage, "held": len(stage.aggregators), "seconds": time.perf_counter() - started}


def models_rows(sizes: tuple[int, ...], cap: int) -> list[dict]:
    _, rules = split_rules(load_rules(RULES))
    feed_models(rules, 3, None)
    rows = []
    for m in sizes:
        for c in (None, cap):
            if c is not None and c >= m:
                continue
            result, grown, traced = measure(True, feed_models, rules, m, c)
            rows.append(
                {
                    "names": m,
                    "cap": c,
                    "held": result["held"],
                    "rss": grown,
                    "traced": traced,
                    "seconds": result["seconds"],
                }
            )
            del result
    return rows


def run(
    realistic: tuple[int, ...] = (1_000, 10_000),
    attack: tuple[int, ...] = (10_000, 100_000),
    node_cap: int = 10_000,
    model_sizes: tuple[int, ...] = (2_000,),
    model_cap: int = 500,
) -> dict:
    """`realistic` and `attack`: node-name counts of each kind (see the module doc), each without a cap and with
    `node_cap` (when it is smaller); models likewise with `model_cap`."""
    nodes = nodes_rows(realistic, min(node_cap, *realistic) if realistic else node_cap, "realistic")
    return {"nodes": nodes + nodes_rows(attack, node_cap, "attack"), "models": models_rows(model_sizes, model_cap)}


def _kb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1024:,.1f}"


def report(result: dict) -> str:
    lines = [
        "| snapshots per name | node names | streams.max_nodes | nodes held | evicted | RSS growth (MB) "
        "| RSS per held node (KB) | tracemalloc per held node (KB) | snapshots/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["nodes"]:
        held = max(r["held"], 1)
        what = "4 (a GPU node)" if r["kind"] == "realistic" else "1 (`node`, 9 samples)"
        lines.append(
            f"| {what} | {r['names']:,} | {r['cap'] or 'off'} | {r['held']:,} | {r['evicted']:,} "
            f"| {r['rss'] / 2**20:,.0f} | {_kb(r['rss'] / held)} "
            f"| {_kb(None if r['traced'] is None else r['traced'] / held)} "
            f"| {r['snapshots'] / r['seconds']:,.0f} |"
        )
    lines += [
        "",
        "| model names | streams.max_models | models held | RSS growth (MB) | tracemalloc per held model (KB) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in result["models"]:
        held = max(r["held"], 1)
        lines.append(
            f"| {r['names']:,} | {r['cap'] or 'off'} | {r['held']:,} | {r['rss'] / 2**20:,.0f} "
            f"| {_kb(None if r['traced'] is None else r['traced'] / held)} |"
        )
    return "\n".join(lines)
