"""Prometheus ingest speed: remote write and federation vs the agent's own path, on the same scrapes.

Input: `nodes` simulated nodes (vLLM, dcgm-exporter, node_exporter and blackbox pages, as the simulator renders
them) over `rounds` collection rounds. The same scrapes go three ways, side by side in one process:

- **agent**: each record through the agent's :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder` (parse the
  page, deltas, snapshot): the baseline;
- **remote write**: each round as the remote-write request a Prometheus that scraped those pages sends (every
  series with its target labels; encoded beforehand, as Prometheus' work) through
  :meth:`RemoteWriteIngest.accept` (snappy, protobuf, grouping, the families, the same builder) and ``poll``;
- **federation**: each round as the /federate answer through :meth:`FederationPuller.ingest` (text parse,
  grouping, builder).

The first round of each path (first scrapes, no deltas, caches filled) is not timed: the figures are a
running ingest's. Each figure is the median of `reps` runs over the other rounds, in CPU seconds of this
process (the machine is shared); throughput counts samples (series values). The "nodes per core" column is
how many nodes one core keeps up with at a 15 s scrape interval: nodes x timed rounds x 15 s / their CPU seconds.

Stage by stage (``python -m bench.ingest_speed --stages``): decode, grouping, handing out the settled scrapes
(their families) and the agent's builder on them, with the garbage collector on, off, and with what is alive
after the warm-up frozen out of its way.
"""

from __future__ import annotations

import statistics
import time

from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.ingest.federation import FederationConfig, FederationPuller
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tests.ingest.prometheus_view import HEADERS, PrometheusView, federate_page, ticks

INTERVAL_S = 15.0


def workload(nodes: int, rounds: int) -> tuple[list[list], list[bytes], list[str]]:
    sim = FleetSimulator(SimConfig(nodes=nodes, seed=3))
    records = list(iter_records(sim, rounds * INTERVAL_S / 60))
    batches = [batch for _ts, batch in ticks(records)]
    view = PrometheusView()
    bodies = [view.metadata_request(records[: 8 * nodes])] + [view.request(b) for b in batches]
    pages = [federate_page(b) for b in batches]
    return batches, bodies, pages


def _grouping(batches: list[list]) -> dict:
    common = tuple(sorted({k for b in batches for r in b for k in r.labels}))
    return {
        "node_labels": ("node",),
        "common_labels": common,
        "drop_labels": ("instance", "node"),
        "interval_s": {"vllm": INTERVAL_S, "dcgm": INTERVAL_S, "node": INTERVAL_S, "blackbox": INTERVAL_S},
    }


def run_agent(batches: list[list]) -> tuple[float, int]:
    builder = SnapshotBuilder()
    for r in batches[0]:  # the first scrape of each source (no deltas yet): not timed
        builder.build(r)
    t0 = time.process_time()
    n = sum(len(builder.build(r).samples) for b in batches[1:] for r in b)
    return time.process_time() - t0, n


def run_remote_write(batches: list[list], bodies: list[bytes]) -> tuple[float, int]:
    ingest = RemoteWriteIngest(IngestConfig(grouping=_grouping(batches)))
    settle = ingest.grouper.config.settle_s
    ingest.accept(bodies[0], HEADERS, now=0.0)  # metadata
    ingest.accept(bodies[1], HEADERS, now=INTERVAL_S)
    ingest.poll(now=INTERVAL_S + settle)  # the first round: not timed
    t0 = time.process_time()
    n = 0
    for i, body in enumerate(bodies[2:], 2):
        n += sum(len(s.samples) for s in ingest.accept(body, HEADERS, now=i * INTERVAL_S).snapshots)
        n += sum(len(s.samples) for s in ingest.poll(now=i * INTERVAL_S + settle).snapshots)
    return time.process_time() - t0, n


def run_federation(batches: list[list], pages: list[str]) -> tuple[float, int]:
    puller = FederationPuller(FederationConfig(url="http://127.0.0.1:9", grouping=_grouping(batches)))
    puller.ingest(pages[0], now=0.0)  # the first round: not timed
    t0 = time.process_time()
    n = 0
    for i, page in enumerate(pages[1:], 1):
        n += sum(len(s.samples) for s in puller.ingest(page, now=i * INTERVAL_S).snapshots)
    return time.process_time() - t0, n


def run(nodes: int = 20, rounds: int = 8, reps: int = 5) -> list[dict]:
    """Each path over `rounds` rounds of `nodes` nodes; the first round warms up, the others are timed."""
    batches, bodies, pages = workload(nodes, rounds)
    timed = len(batches) - 1
    out = []
    for name, fn in (
        ("agent (baseline)", lambda: run_agent(batches)),
        ("remote write", lambda: run_remote_write(batches, bodies)),
        ("federation", lambda: run_federation(batches, pages)),
    ):
        runs = [fn() for _ in range(reps)]
        seconds = statistics.median(r[0] for r in runs)
        samples = runs[0][1]
        out.append(
            {
                "path": name,
                "samples": samples,
                "seconds": seconds,
                "samples_per_s": samples / seconds,
                "ms_per_node": seconds / (nodes * timed) * 1000,
                "nodes_per_core": nodes * timed * INTERVAL_S / seconds,
                "request_bytes": sum(len(b) for b in bodies) // max(1, len(bodies)) if name == "remote write" else None,
            }
        )
    return out


def report(rows: list[dict]) -> str:
    base = rows[0]["seconds"]
    lines = [
        "| path | samples | CPU seconds (median) | samples/s | ms per node and round | cost vs agent | "
        "nodes per core at 15 s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['samples']:,} | {r['seconds']:.3f} | {r['samples_per_s']:,.0f} | "
            f"{r['ms_per_node']:.2f} | {r['seconds'] / base:.2f}x | {r['nodes_per_core']:,.0f} |"
        )
    rw = next(r for r in rows if r["request_bytes"])
    lines.append(f"\nremote-write request (one round of every node, snappy): {rw['request_bytes']:,} bytes on average")
    return "\n".join(lines)


STAGES = ("decode", "grouping", "hand-out", "builder")


def stages(
    nodes: int = 20, rounds: int = 8, reps: int = 5, collector: bool = True, frozen: bool = False
) -> dict[str, float]:
    """Where remote write's CPU goes, stage by stage (median CPU seconds of the timed rounds), and the agent
    path's total beside it; `collector` False: the same with the garbage collector off (what its collections
    cost); `frozen`: what is alive after the warm-up round frozen out of its way (as ``tailhound ingest``
    does after its warm-up)."""
    import gc

    from tailhound.ingest.remote_write import decode_write_request

    batches, bodies, _ = workload(nodes, rounds)
    runs = []
    was = gc.isenabled()
    if not collector:
        gc.disable()
    try:
        for _ in range(reps):
            ingest = RemoteWriteIngest(IngestConfig(grouping=_grouping(batches)))
            grouper, settle = ingest.grouper, ingest.grouper.config.settle_s
            ingest.accept(bodies[0], HEADERS, now=0.0)
            ingest.accept(bodies[1], HEADERS, now=INTERVAL_S)
            ingest.poll(now=INTERVAL_S + settle)
            if frozen:
                gc.collect()
                gc.freeze()
            t = dict.fromkeys(STAGES, 0.0)
            for i, body in enumerate(bodies[2:], 2):
                t0 = time.process_time()
                request = decode_write_request(body)
                t1 = time.process_time()
                grouper.add_metadata(request.metadata)
                grouper.add(request.series, i * INTERVAL_S)
                t2 = time.process_time()
                records = grouper.ready(i * INTERVAL_S + settle)
                t3 = time.process_time()
                for rec in records:
                    ingest.builder.build(rec)
                t4 = time.process_time()
                for k, a, b in zip(STAGES, (t0, t1, t2, t3), (t1, t2, t3, t4), strict=True):
                    t[k] += b - a
            t["agent path"] = run_agent(batches)[0]
            runs.append(t)
            if frozen:
                gc.unfreeze()
    finally:
        if was:
            gc.enable()
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def stages_report(on: dict[str, float], off: dict[str, float], frozen: dict[str, float]) -> str:
    runs = {"collector on": on, "off": off, "frozen after warm-up": frozen}
    lines = ["| stage | " + " | ".join(f"CPU s, {k}" for k in runs) + " |", "|---|" + "---:|" * len(runs)]
    for k in (*STAGES, "agent path"):
        lines.append(f"| {k} | " + " | ".join(f"{r[k]:.3f}" for r in runs.values()) + " |")
    ratios = ", ".join(f"{k}: {sum(r[s] for s in STAGES) / r['agent path']:.2f}x" for k, r in runs.items())
    return "\n".join(lines) + f"\n\nremote write / agent path: {ratios}"


if __name__ == "__main__":
    import sys

    if "--stages" in sys.argv:
        print(stages_report(stages(), stages(collector=False), stages(frozen=True)))
    else:
        print(report(run()))
