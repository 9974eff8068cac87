"""A node's state record on the table and its memory in steady state: `nodes` simulated nodes (vllm + dcgm + node +
blackbox at 15 s, as bench.fleet_scale makes them) stepped for `rounds` collection rounds (120: 30 minutes, 960: 4
hours, when the baselines' rings are full). Prints the median record as the state codec writes it, the RSS growth per
node (after a full collection) and the CPU per snapshot. ``python -m bench.state_size NODES ROUNDS``.

``--slope A,B``: the RSS a further node costs, without the fixed cost (memos, plans, interned names) that a run of few
nodes divides by few: A and B nodes each in a fresh interpreter, ``(growth(B) - growth(A)) / (B - A)`` (:func:`slope`).

``--breakdown``: the live objects per node by part of the state (:func:`breakdown`): ``sys.getsizeof`` of every
object reachable from each part, each object counted once, what the modules, the rules and the catalog reach
counted as already seen (shared, not a node's). RSS holds these plus the allocator's free space."""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time

from faust.serializers import codecs

from tailhound.streams.codec import STATE_CODEC_NAME, decode_snapshot, register
from tailhound.streams.model_stage import split_rules
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules

from .fleet_memory import rss
from .fleet_scale import RULES, TEMPLATE, node_names, template_rounds


def reachable(obj: object, seen: set[int]) -> int:
    """Bytes of `obj` and of what it reaches that is not in `seen` (which it extends)."""
    total, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def breakdown(processor: SnapshotProcessor, store: MemoryStateStore) -> dict[str, float]:
    """Bytes per node of the processor's live state by part (see the module doc), largest first."""
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if name != "__main__":
            reachable(module, seen)
    reachable(processor.rules, seen)
    reachable(processor.catalog, seen)
    parts: dict[str, int] = {}
    states = list(processor._states.values())
    for state in states:
        private = state.__pydantic_private__ or {}
        for key, label in (
            ("_tracker", "latency windows"),
            ("_baseline_objs", "baselines"),
            ("_latest", "latest values"),
        ):
            parts[label] = parts.get(label, 0) + reachable(private.get(key), seen)
        for field in type(state).model_fields:
            parts[f"field {field}"] = parts.get(f"field {field}", 0) + reachable(getattr(state, field), seen)
        parts["rest of the state"] = parts.get("rest of the state", 0) + reachable(state, seen)
    parts["records on the table"] = sum(reachable(value, seen) for _, value in store.items())
    n = max(1, len(states))
    return {k: v / n for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v}


def run(nodes: int, rounds: int, parts: bool = False) -> dict:
    """Step `nodes` nodes for `rounds` rounds; record bytes (median), RSS growth per node, CPU per snapshot
    (`parts`: and the :func:`breakdown`)."""
    register()
    messages = template_rounds(rounds)
    node_rules, _ = split_rules(load_rules(RULES))
    names = node_names(nodes)
    gc.collect()
    before = rss()
    processor, store = SnapshotProcessor(node_rules), MemoryStateStore()
    started, steps = time.process_time(), 0
    for messages_of_round in messages:
        for _, raw in messages_of_round:
            for name in names:
                snap = decode_snapshot(raw.replace(TEMPLATE.encode(), name))
                result = processor.step(store.get(snap.node), snap)
                steps += 1
                if result.changed:
                    store[snap.node] = result.state
    cpu = time.process_time() - started
    gc.collect()
    sizes = [len(codecs.dumps(STATE_CODEC_NAME, value)) for _, value in store.items()]
    out = {
        "record_bytes": statistics.median(sizes),
        "rss_per_node": (rss() - before) / nodes,
        "us_per_snapshot": cpu / steps * 1e6,
    }
    if parts:
        out["breakdown"] = breakdown(processor, store)
    return out


def slope(sizes: tuple[int, int], rounds: int) -> dict:
    """RSS per further node between two fleet sizes, each run in a fresh interpreter, and the fixed cost."""
    growth = {}
    for n in sizes:
        out = subprocess.run(
            [sys.executable, "-m", "bench.state_size", "--json", str(n), str(rounds)],
            check=True,
            capture_output=True,
            text=True,
            timeout=1800,
        ).stdout
        growth[n] = json.loads(out.strip().splitlines()[-1])["rss_per_node"] * n
    a, b = sizes
    per_node = (growth[b] - growth[a]) / (b - a)
    return {"sizes": sizes, "rounds": rounds, "growth": growth, "per_node": per_node, "fixed": growth[a] - per_node * a}


def report_slope(got: dict) -> str:
    a, b = got["sizes"]
    growth = got["growth"]
    mb = {n: growth[n] / 2**20 for n in (a, b)}
    return (
        f"RSS growth at {got['rounds']} rounds: {a} nodes {mb[a]:.1f} MB, {b} nodes {mb[b]:.1f} MB: "
        f"{got['per_node'] / 1024:.0f} KB per further node, {got['fixed'] / 2**20:.1f} MB fixed"
    )


def main(argv: list[str]) -> None:
    numbers = [a for a in argv if a.isdigit()]
    if "--slope" in argv:
        sizes = tuple(int(x) for x in argv[argv.index("--slope") + 1].split(","))
        rounds = int(numbers[0]) if numbers else 960
        print(report_slope(slope((sizes[0], sizes[1]), rounds)))
        return
    nodes, rounds = (int(a) for a in numbers[:2]) if len(numbers) >= 2 else (100, 120)
    got = run(nodes, rounds, parts="--breakdown" in argv)
    if "--json" in argv:
        print(json.dumps(got))
        return
    print(
        f"{nodes} nodes x {rounds} rounds: record {got['record_bytes'] / 1024:.1f} KB, RSS growth "
        f"{got['rss_per_node'] / 1024:.0f} KB per node, {got['us_per_snapshot']:.0f} us per snapshot"
    )
    if "breakdown" in got:
        print("\n| part (live objects) | KB per node |\n|---|---:|")
        for part, size in got["breakdown"].items():
            print(f"| {part} | {size / 1024:.1f} |")
        print(f"| **all** | **{sum(got['breakdown'].values()) / 1024:.1f}** |")


if __name__ == "__main__":
    main(sys.argv[1:])
