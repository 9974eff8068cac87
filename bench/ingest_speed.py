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
process (the machine is shared); the paths take turns, run by run. Throughput counts samples (series values).
The "nodes per core" column is how many nodes one core keeps up with at a 15 s scrape interval: nodes x timed
rounds x 15 s / their CPU seconds.

Garbage collector (:func:`collector`): each path runs under the settings of the process that really runs it
(``process``, the default): the agent path under ``tailhound agent``'s (``agents/main.py``: what exists
frozen, thresholds ``GC_THRESHOLD``, 10, 10); remote write and federation under ``tailhound ingest``'s
(:func:`tailhound.cli.ingest.tune_gc`: what exists frozen, young threshold ``GC_GEN0_THRESHOLD``; and what is
alive after the untimed first round frozen, the warm-up freeze). What exists includes the bench's workload
(its pages and requests), which in a real process would not be alive at all. For comparison every path also
runs under CPython's defaults (``default``: 700, 10, 10, nothing frozen). Each run starts from a collection
and puts the process's settings back afterwards.

Stage by stage (``python -m bench.ingest_speed --stages``): decode, grouping, handing out the settled scrapes
(their families) and the agent's builder on them, under the processes' settings, CPython's defaults and with
the collector off.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator

from tailhound.agents.main import GC_THRESHOLD
from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.cli.ingest import freeze_long_lived, tune_gc
from tailhound.ingest.federation import FederationConfig, FederationPuller
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tests.ingest.prometheus_view import HEADERS, PrometheusView, federate_page, ticks

INTERVAL_S = 15.0
#: CPython 3.11's collector thresholds (young, middle, old) in a fresh process
DEFAULT_THRESHOLD = (700, 10, 10)
#: ``process``: each path under its own process's settings; ``default``: CPython's; ``off``: no collector
GC_MODES = ("process", "default", "off")


def _nothing() -> None:
    """The warm-up hook of a process that freezes nothing after its warm-up."""


@contextlib.contextmanager
def collector(path: str, mode: str) -> Iterator[Callable[[], None]]:
    """Run `path` ("agent" or "ingest") under `mode` (GC_MODES); yields the hook to call after the warm-up round.
    Starts from a collection; the process's settings (thresholds, on/off, nothing frozen) come back after."""
    before, was, frozen = gc.get_threshold(), gc.isenabled(), gc.get_freeze_count()
    gc.set_threshold(*DEFAULT_THRESHOLD)
    gc.collect()
    warm = _nothing
    (gc.disable if mode == "off" else gc.enable)()
    if mode == "process" and path == "agent":  # as agents/main.py does before the agent runs
        gc.freeze()
        gc.set_threshold(GC_THRESHOLD, 10, 10)
    elif mode == "process":  # tailhound ingest: tuned at start, frozen again after the warm-up
        tune_gc()
        warm = freeze_long_lived
    try:
        yield warm
    finally:
        if not frozen:  # (what the caller froze stays frozen)
            gc.unfreeze()
        gc.set_threshold(*before)
        (gc.enable if was else gc.disable)()


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


def run_agent(batches: list[list], warm: Callable[[], None] = _nothing) -> tuple[float, int]:
    builder = SnapshotBuilder()
    for r in batches[0]:  # the first scrape of each source (no deltas yet): not timed
        builder.build(r)
    warm()
    t0 = time.process_time()
    n = sum(len(builder.build(r).samples) for b in batches[1:] for r in b)
    return time.process_time() - t0, n


def run_remote_write(
    batches: list[list], bodies: list[bytes], warm: Callable[[], None] = _nothing
) -> tuple[float, int]:
    ingest = RemoteWriteIngest(IngestConfig(grouping=_grouping(batches)))
    settle = ingest.grouper.config.settle_s
    ingest.accept(bodies[0], HEADERS, now=0.0)  # metadata
    ingest.accept(bodies[1], HEADERS, now=INTERVAL_S)
    ingest.poll(now=INTERVAL_S + settle)  # the first round: not timed
    warm()
    t0 = time.process_time()
    n = 0
    for i, body in enumerate(bodies[2:], 2):
        n += sum(len(s.samples) for s in ingest.accept(body, HEADERS, now=i * INTERVAL_S).snapshots)
        n += sum(len(s.samples) for s in ingest.poll(now=i * INTERVAL_S + settle).snapshots)
    return time.process_time() - t0, n


def run_federation(batches: list[list], pages: list[str], warm: Callable[[], None] = _nothing) -> tuple[float, int]:
    puller = FederationPuller(FederationConfig(url="http://127.0.0.1:9", grouping=_grouping(batches)))
    puller.ingest(pages[0], now=0.0)  # the first round: not timed
    warm()
    t0 = time.process_time()
    n = 0
    for i, page in enumerate(pages[1:], 1):
        n += sum(len(s.samples) for s in puller.ingest(page, now=i * INTERVAL_S).snapshots)
    return time.process_time() - t0, n


PATHS = ("agent (baseline)", "remote write", "federation")


def run(nodes: int = 20, rounds: int = 8, reps: int = 5, modes: tuple[str, ...] = ("process", "default")) -> list[dict]:
    """Each path over `rounds` rounds of `nodes` nodes under each of `modes` (GC_MODES); the first round warms
    up, the others are timed. One row per mode and path; the paths and modes take turns, run by run."""
    batches, bodies, pages = workload(nodes, rounds)
    timed = len(batches) - 1
    fns: dict[str, tuple[str, Callable[[Callable[[], None]], tuple[float, int]]]] = {
        "agent (baseline)": ("agent", lambda w: run_agent(batches, w)),
        "remote write": ("ingest", lambda w: run_remote_write(batches, bodies, w)),
        "federation": ("ingest", lambda w: run_federation(batches, pages, w)),
    }
    runs: dict[tuple[str, str], list[tuple[float, int]]] = {(m, p): [] for m in modes for p in PATHS}
    for _ in range(reps):
        for mode in modes:
            for name, (kind, fn) in fns.items():
                with collector(kind, mode) as warm:
                    runs[mode, name].append(fn(warm))
    out = []
    for (mode, name), rs in runs.items():
        seconds = statistics.median(r[0] for r in rs)
        samples = rs[0][1]
        out.append(
            {
                "gc": mode,
                "path": name,
                "samples": samples,
                "seconds": seconds,
                "runs": [r[0] for r in rs],
                "samples_per_s": samples / seconds,
                "ms_per_node": seconds / (nodes * timed) * 1000,
                "nodes_per_core": nodes * timed * INTERVAL_S / seconds,
                "request_bytes": sum(len(b) for b in bodies) // max(1, len(bodies)) if name == "remote write" else None,
            }
        )
    return out


def report(rows: list[dict]) -> str:
    base = {r["gc"]: r["seconds"] for r in rows if r["path"] == PATHS[0]}
    lines = [
        "| path | collector | samples | CPU seconds (median) | samples/s | ms per node and round | cost vs agent | "
        "nodes per core at 15 s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['gc']} | {r['samples']:,} | {r['seconds']:.3f} | {r['samples_per_s']:,.0f} | "
            f"{r['ms_per_node']:.2f} | {r['seconds'] / base[r['gc']]:.2f}x | {r['nodes_per_core']:,.0f} |"
        )
    rw = next(r for r in rows if r["request_bytes"])
    lines.append(f"\nremote-write request (one round of every node, snappy): {rw['request_bytes']:,} bytes on average")
    return "\n".join(lines)


STAGES = ("decode", "grouping", "hand-out", "builder")


def _stage_times(batches: list[list], bodies: list[bytes], mode: str) -> dict[str, float]:
    """One run of the timed rounds through remote write's stages, each timed apart, under the ingest's `mode`."""
    from tailhound.ingest.remote_write import decode_write_request

    with collector("ingest", mode) as warm:
        ingest = RemoteWriteIngest(IngestConfig(grouping=_grouping(batches)))
        grouper, settle = ingest.grouper, ingest.grouper.config.settle_s
        ingest.accept(bodies[0], HEADERS, now=0.0)
        ingest.accept(bodies[1], HEADERS, now=INTERVAL_S)
        ingest.poll(now=INTERVAL_S + settle)
        warm()
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
    return t


def stages(nodes: int = 20, rounds: int = 8, reps: int = 5, mode: str = "process") -> dict[str, float]:
    """Where remote write's CPU goes, stage by stage (median CPU seconds of the timed rounds), and the agent
    path's total beside it, each under `mode` (GC_MODES: ``process`` is the ingest's settings for the stages,
    the agent's for the agent path)."""
    batches, bodies, _ = workload(nodes, rounds)
    runs = []
    for _ in range(reps):
        t = _stage_times(batches, bodies, mode)
        with collector("agent", mode) as warm:
            t["agent path"] = run_agent(batches, warm)[0]
        runs.append(t)
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def stages_report(by_mode: dict[str, dict[str, float]]) -> str:
    """`by_mode`: :func:`stages` under each mode, by its name."""
    lines = ["| stage | " + " | ".join(f"CPU s, {k}" for k in by_mode) + " |", "|---|" + "---:|" * len(by_mode)]
    for k in (*STAGES, "agent path"):
        lines.append(f"| {k} | " + " | ".join(f"{r[k]:.3f}" for r in by_mode.values()) + " |")
    ratios = ", ".join(f"{k}: {sum(r[s] for s in STAGES) / r['agent path']:.2f}x" for k, r in by_mode.items())
    return "\n".join(lines) + f"\n\nremote write / agent path: {ratios}"


if __name__ == "__main__":
    import sys

    if "--stages" in sys.argv:
        print(stages_report({m: stages(mode=m) for m in GC_MODES}))
    else:
        print(report(run()))
