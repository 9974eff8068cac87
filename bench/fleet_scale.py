"""Cost per snapshot against fleet size: the worker's in-process work at 10, 1,000 and 10,000 nodes serving one model.

Method: one simulated node (vllm + dcgm + node + blackbox at 15 s, FleetSimulator) gives the snapshots of
`warm + rounds` collection rounds; each is encoded once as the agent sends it (version 1 JSON) and, per node
name, the name is substituted in the bytes, so every node of the fleet sends a round with the same values at
the same event time. Each message goes through what the ``evaluate`` agent does with it: decode
(:func:`tailhound.streams.codec.decode_snapshot`), :meth:`SnapshotProcessor.step` on the stored state (a
:class:`MemoryStateStore`, the state stored when changed), and, for the engine snapshot, the model stage
(:meth:`ModelStage.add` with the node's open causes, every node serving one model, the model rules). Kafka and
Faust are left out (they cost the same per snapshot at any fleet size). Timed over the last `rounds` rounds
only (the first `warm` build the state), in CPU time (``process_time``: the machine is shared), per phase and in
all; garbage collections with ``gc.callbacks``. "State JSON per node" is the median size of the nodes'
stored records as the state codec writes them; "RSS growth" is the process's resident set after the run less
before it; "nodes per core" is node rounds per CPU-second times 15 s. ``--gc``: ``default`` (CPython's
thresholds), ``worker`` (:func:`tailhound.streams.app.tune_gc`'s thresholds and start-up freeze) or
``worker+warmup`` (that and the worker's warm-up freezes, :class:`tailhound.streams.gc_freeze.WarmupFreeze`, one
call per message); "GC share" is GC time over all CPU time, "of which freezes" the warm-up freezes' own full
collections that fell in the measured rounds (one-time: at each doubling of the messages).
``python -m bench.fleet_scale 10,1000,10000 [--gc MODE] [--reps N]``.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

from faust.serializers import codecs

from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.streams import gc_freeze
from tailhound.streams.app import GC_GEN0_THRESHOLD
from tailhound.streams.codec import STATE_CODEC_NAME, decode_snapshot, register
from tailhound.streams.model_stage import ModelStage, split_rules
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules

from .fleet_memory import rss

RULES = Path(__file__).resolve().parents[1] / "rules"
TICK_S = 15.0
#: the simulated node's name, substituted per node in the encoded messages
TEMPLATE = "gpu-node-1"
GC_MODES = ("default", "worker", "worker+warmup")


def template_rounds(rounds: int) -> list[list[tuple[str, bytes]]]:
    """Per collection round of one simulated node, (source, message bytes) of each source."""
    builder = SnapshotBuilder()
    by_ts: dict[float, list[tuple[str, bytes]]] = {}
    minutes = (rounds + 2) * TICK_S / 60
    for rec in iter_records(FleetSimulator(SimConfig(nodes=1, interval_s=TICK_S)), minutes):
        snap = builder.build(rec)
        by_ts.setdefault(snap.ts, []).append((snap.source, snap.model_dump_json().encode()))
    full = [msgs for _, msgs in sorted(by_ts.items()) if len(msgs) == 4]
    return full[1 : rounds + 1]  # the first round has no deltas


def node_names(n: int) -> list[bytes]:
    return [f"gpu-node-{i:06d}".encode() for i in range(n)]


def run_size(n: int, rounds: list[list[tuple[str, bytes]]], warm: int, gc_mode: str = "default") -> dict:
    """`n` nodes through decode, step and the model stage for every round; timings of the rounds after `warm`."""
    thresholds = gc.get_threshold()
    if gc_mode != "default":  # as tune_gc in a worker: what exists at start frozen, young collections rarer
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, *thresholds[1:])
    freezer = None
    if gc_mode == "worker+warmup":
        gc_freeze.enable()
        freezer = gc_freeze.WarmupFreeze(last=gc_freeze.last_freeze_for(n))  # (a worker with max_nodes >= n)
    node_rules, model_rules = split_rules(load_rules(RULES))
    processor, store = SnapshotProcessor(node_rules), MemoryStateStore()
    stage, model_store = ModelStage(model_rules), MemoryStateStore()
    names, template = node_names(n), TEMPLATE.encode()
    phases = {"decode": {}, "step": {}}
    add_s, adds, gc_s = 0.0, 0, [0.0]
    started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.process_time())
        elif started:
            gc_s[0] += time.process_time() - started.pop()

    gc.collect()
    before = rss()
    cpu0 = frozen_s = 0.0
    for r, messages in enumerate(rounds):
        measured = r >= warm
        if r == warm:
            gc_s[0] = 0.0
            frozen_s = freezer.seconds if freezer is not None else 0.0
            gc.callbacks.append(on_gc)
            cpu0 = time.process_time()
        for name in names:
            node = name.decode()
            for source, raw in messages:
                if freezer is not None:
                    freezer.seen()
                t0 = time.process_time()
                snap = decode_snapshot(raw.replace(template, name))
                t1 = time.process_time()
                step = processor.step(store.get(node), snap)
                if step.changed:
                    store[node] = step.state
                t2 = time.process_time()
                if measured:
                    phases["decode"].setdefault(source, []).append(t1 - t0)
                    phases["step"].setdefault(source, []).append(t2 - t1)
                if source in ("vllm", "tgi", "nim", "sglang"):
                    causes = processor.open_causes(node)
                    t3 = time.process_time()
                    for key in stage.keys(snap):
                        stage.add(key, snap, causes, store=model_store)
                    if measured:
                        add_s += time.process_time() - t3
                        adds += 1
    cpu = time.process_time() - cpu0
    gc.callbacks.remove(on_gc)
    gc.unfreeze()  # (the next size starts from the same collector)
    gc_freeze.enable(False)
    gc.set_threshold(*thresholds)
    grown = rss() - before
    sizes = [len(codecs.dumps(STATE_CODEC_NAME, state)) for _, state in store.items()]
    ticks = n * (len(rounds) - warm)
    return {
        "nodes": n,
        "gc_mode": gc_mode,
        "ticks": ticks,
        "cpu_s": cpu,
        "gc_s": gc_s[0],
        # the warm-up freezes' own collections during the measured rounds (once per doubling of the messages)
        "freeze_s": (freezer.seconds - frozen_s) if freezer is not None else 0.0,
        "rss": grown,
        "add_us": add_s / max(adds, 1) * 1e6,
        "step_us": {s: statistics.mean(v) * 1e6 for s, v in phases["step"].items()},
        "decode_us": {s: statistics.mean(v) * 1e6 for s, v in phases["decode"].items()},
        "state_bytes": statistics.median(sizes) if sizes else 0,
        "nodes_per_core": ticks / cpu * TICK_S if cpu else 0.0,
        "model_snapshots": sum(len(v) for v in model_store.items()),
        "incidents": len(stage.model_processor._states),
    }


def run(
    sizes: tuple[int, ...] = (10, 1_000, 10_000),
    rounds: int = 3,
    warm: int = 2,
    gc_modes: tuple[str, ...] = ("default",),
    reps: int = 1,
) -> dict:
    """Every size in turn (smallest first), each from a fresh processor and stage, in each GC mode; with `reps`
    runs of each, the run with the median CPU time is kept."""
    register()
    msgs = template_rounds(warm + rounds)
    run_size(3, msgs, 1)  # one-time caches (catalog, rule facts, imports) outside the measurements
    rows = []
    for n in sizes:
        for mode in gc_modes:
            runs = sorted((run_size(n, msgs, warm, mode) for _ in range(reps)), key=lambda r: r["cpu_s"])
            rows.append(runs[len(runs) // 2])
            print(
                f"  {n:,} nodes, gc {mode}: {rows[-1]['cpu_s']:,.1f} CPU-s"
                f" (runs {[round(r['cpu_s'], 1) for r in runs]}),"
                f" GC {[round(r['gc_s'], 2) for r in runs]} s (freezes {[round(r['freeze_s'], 2) for r in runs]} s),"
                f" {rows[-1]['nodes_per_core']:,.0f} nodes per core",
                file=sys.stderr,
                flush=True,
            )
    return {"rounds": rounds, "warm": warm, "rows": rows}


def report(result: dict) -> str:
    lines = [
        f"{result['warm']} rounds to build the state, {result['rounds']} measured; one process, no Kafka",
        "",
        "| nodes | GC | model-stage add per engine snapshot | vLLM step | dcgm decode | state JSON per node "
        "| RSS growth | GC time (of which freezes) | GC share | CPU per node tick | nodes per core |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = None
    for r in result["rows"]:
        per_tick = r["cpu_s"] / r["ticks"] * 1e3
        base = base or per_tick
        lines.append(
            f"| {r['nodes']:,} | {r['gc_mode']} | {r['add_us']:,.0f} us | {r['step_us'].get('vllm', 0):,.0f} us "
            f"| {r['decode_us'].get('dcgm', 0):,.0f} us | {r['state_bytes'] / 1024:,.1f} KB "
            f"| {r['rss'] / 2**20:,.0f} MB | {r['gc_s']:,.2f} s ({r['freeze_s']:,.2f} s) "
            f"| {r['gc_s'] / r['cpu_s']:.1%} | {per_tick:,.2f} ms ({per_tick / base:.2f}x) "
            f"| {r['nodes_per_core']:,.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.fleet_scale", description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="?", default="10,1000,10000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--gc", default="default", help=f"comma-separated GC modes: {', '.join(GC_MODES)}")
    ap.add_argument("--reps", type=int, default=1, help="runs per size and mode (the median is reported)")
    a = ap.parse_args()
    modes = tuple(a.gc.split(","))
    if set(modes) - set(GC_MODES):
        ap.error(f"--gc: one of {', '.join(GC_MODES)}")
    sizes = tuple(int(s) for s in a.sizes.split(","))
    print(report(run(sizes, a.rounds, a.warm, modes, a.reps)))
