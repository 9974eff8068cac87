"""Scale out (issue 16): how many GPU nodes one worker core keeps up with, for the default rules.

A node here is what the throughput benchmark simulates (:mod:`bench.streams_throughput`): vLLM + dcgm-exporter
(8 GPUs) + node_exporter + blackbox, each collected every 15 s, i.e. 4 snapshots per 15 s; with ``nvml`` the
node also runs the agent's NVML collector at 1 s (15 more per 15 s, an 8-GPU H200's real collections).
"Nodes per worker core" is the worker's snapshots per CPU-second (its own utime + stime over the measured
window, the figure that does not depend on how long it waited for fetches) over a node's snapshots per
second::

    nodes per core = snapshots per CPU-second / (snapshots per node per 15 s / 15 s)

Telemetry shapes, all produced to one broker and measured interleaved (shape by shape inside each
repetition, so the machine's drift hits all alike):

- ``per-source``: one message per snapshot (telemetry version 1), what agents send by default;
- ``bundled``: one message per node and tick (version 2, ``publish.bundle``): the worker handles a
  node's tick in one message. Needs a worker that reads bundles (``streams.app`` with the bundle loop; before
  it is applied, ``BENCH_STREAMS_APP=FILE`` runs a proposed ``streams/app.py``);
- the same two with ``--nvml``.

Variants as in the throughput benchmark: ``tailhound`` (the worker, default rules), ``wiring`` (the worker
with no rule run: what the worker around the rules costs) and ``faust`` (a trivial Faust agent: what Faust's
per-message machinery costs). ``python -m bench.nodes_per_core 4096 --reps 3 [--nvml]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from tailhound.broker import EmbeddedBroker
from tailhound.kafka import ensure_topics
from tailhound.settings import Settings

from .fleet_telemetry import NODES, RULES, bundled, fleet_messages, produce
from .streams_throughput import LABELS, measure

#: snapshots a node publishes per 15 s: vllm, dcgm, node, blackbox; with NVML at 1 s 15 more
PER_TICK = {False: 4, True: 19}
TICK_S = 15.0
SHAPES = ("per-source", "bundled")
VARIANTS = ("tailhound", "wiring", "faust")


def nodes_per_core(cpu_rate: float, nvml: bool = False) -> float:
    """Nodes one busy core keeps up with at `cpu_rate` snapshots per CPU-second."""
    return cpu_rate / (PER_TICK[nvml] / TICK_S)


async def run(
    n: int = 4096,
    reps: int = 3,
    nvml: bool = False,
    shapes: tuple[str, ...] = SHAPES,
    variants: tuple[str, ...] = VARIANTS,
    nodes: int = NODES,
) -> dict:
    """Every (shape, variant) `reps` times, interleaved; each run a child process with its own group."""
    warmup = nodes * 4
    single = fleet_messages(warmup + n, nodes, nvml=nvml)
    inputs = {"per-source": single, "bundled": bundled(single)}
    runs: dict[tuple[str, str], list[dict]] = {(s, v): [] for s in shapes for v in variants}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        settings = {}
        for shape in shapes:
            s = settings[shape] = Settings(
                broker=broker.url,
                topic_prefix=f"bench{uuid.uuid4().hex[:6]}.",
                rules_dir=RULES,
                streams={"data_dir": Path(tmp)},
            )
            await ensure_topics(s)
            await produce(s, inputs[shape])
        for rep in range(reps):
            for shape in shapes:
                for variant in variants:
                    out = await measure(variant, settings[shape], warmup, n, Path(tmp))
                    runs[(shape, variant)].append(out)
                    print(
                        f"  rep {rep + 1}/{reps} {shape} {variant}: {out['cpu_rate']:,.0f} snapshots per CPU-second",
                        file=sys.stderr,
                    )
    return {
        "n": n,
        "reps": reps,
        "nvml": nvml,
        "nodes": nodes,
        "runs": runs,
        "messages": {s: len(inputs[s]) for s in shapes},
    }


def report(result: dict) -> str:
    nvml = result["nvml"]
    lines = [
        f"{result['n']:,} snapshots per run ({result['nodes']} nodes x vllm + dcgm + node + blackbox at 15 s"
        f"{' + NVML at 1 s' if nvml else ''}; {PER_TICK[nvml]} snapshots per node per 15 s); medians of "
        f"{result['reps']}, shapes and variants interleaved.",
        "",
        "| shape | consumer | snapshots per CPU-second | runs | CPU (% of one core) | nodes per worker core |",
        "|---|---|---:|---|---:|---:|",
    ]
    for (shape, variant), rs in result["runs"].items():
        if not rs:
            continue
        rate = statistics.median(r["cpu_rate"] for r in rs)
        each = ", ".join(f"{r['cpu_rate']:,.0f}" for r in rs)
        cpu = statistics.median(r["cpu_pct"] for r in rs)
        lines.append(
            f"| {shape} ({result['messages'][shape]:,} messages) | {LABELS[variant]} | {rate:,.0f} | {each} "
            f"| {cpu:.0f} | **{nodes_per_core(rate, nvml):,.0f}** |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.nodes_per_core", description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nvml", action="store_true", help="every node also runs the NVML collector at 1 s")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    print(report(asyncio.run(run(a.n, a.reps, a.nvml, tuple(a.shapes.split(",")), tuple(a.variants.split(","))))))
