"""A node's state record on the table and its memory in steady state: `nodes` simulated nodes (vllm + dcgm + node +
blackbox at 15 s, as bench.fleet_scale makes them) stepped for `rounds` collection rounds (120: 30 minutes, 960: 4
hours, when the baselines' rings are full). Prints the median record as the state codec writes it, the RSS growth per
node (after a full collection) and the CPU per snapshot. ``python -m bench.state_size NODES ROUNDS``."""

from __future__ import annotations

import gc
import statistics
import sys
import time

from faust.serializers import codecs

from tailhound.streams.codec import STATE_CODEC_NAME, decode_snapshot, register
from tailhound.streams.model_stage import split_rules
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules

from .fleet_memory import rss
from .fleet_scale import RULES, TEMPLATE, node_names, template_rounds


def run(nodes: int, rounds: int) -> dict:
    """Step `nodes` nodes for `rounds` rounds; record bytes (median), RSS growth per node, CPU per snapshot."""
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
    return {
        "record_bytes": statistics.median(sizes),
        "rss_per_node": (rss() - before) / nodes,
        "us_per_snapshot": cpu / steps * 1e6,
    }


def main(argv: list[str]) -> None:
    nodes, rounds = (int(a) for a in argv[:2]) if len(argv) >= 2 else (100, 120)
    got = run(nodes, rounds)
    print(
        f"{nodes} nodes x {rounds} rounds: record {got['record_bytes'] / 1024:.1f} KB, RSS growth "
        f"{got['rss_per_node'] / 1024:.0f} KB per node, {got['us_per_snapshot']:.0f} us per snapshot"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
