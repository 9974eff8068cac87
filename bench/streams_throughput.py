"""Streams throughput: the same telemetry messages consumed several ways, side by side in one run.

The fleet's messages (:mod:`bench.fleet_telemetry`) are produced once to the bundled broker; each Kafka variant
is a child process with its own consumer group (:mod:`bench.streams_child`) reading the topic from the start:

- ``aiokafka``: a plain consumer that only counts (a loose upper bound: a few fetch rounds);
- ``faust`` / ``faust-json``: a trivial Faust agent with the real app's settings, raw or JSON-decoded values;
- ``tailhound``: the real worker as ``tailhound worker`` runs it, observed (its step counts after it returns);
- ``wiring``: the same worker with the step replaced by a counter: what the worker around the rules costs;
- ``step``: no Kafka, ``SnapshotProcessor.step`` over the decoded snapshots in this process.

The window runs from message ``warmup`` to ``warmup + n`` (group join and recovery outside it); rate and CPU
are over that window, the group's lag must reach 0 afterwards. Variants are interleaved ``reps`` times; medians
are reported. ``--bundle`` / ``--nvml`` change the telemetry's shape; ``BENCH_STREAMS_APP=FILE`` runs FILE as
``tailhound.streams.app`` in the children; ``BENCH_STREAMS_PROFILE=DIR`` writes where a child's time goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tailhound.broker import EmbeddedBroker, _die_with_parent
from tailhound.kafka import ensure_topics, group_lag
from tailhound.settings import Settings
from tailhound.streams.codec import decode_message
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules

from .child_profile import PROFILE_ENV, PROFILE_MODE_ENV
from .fleet_telemetry import NODES, ROOT, RULES, bundled, fleet_messages, produce, snapshots_in
from .streams_child import timing

VARIANTS = ("aiokafka", "faust", "faust-json", "tailhound", "wiring", "step")
LABELS = {
    "aiokafka": "(a) plain aiokafka consumer, counts only (upper bound)",
    "faust": "(b) trivial Faust agent, same app settings, counts only",
    "faust-json": "(b') trivial Faust agent, Faust's default JSON values, counts only",
    "tailhound": "(c) tailhound worker: create_app + default rules",
    "wiring": "(c0) the same worker, step replaced by a counter (no rules run)",
    "step": "(d) SnapshotProcessor.step only, no Kafka (decoded snapshots)",
    "decode": "(d') codec decode only, no Kafka (reference)",
}


async def stop_child(proc: subprocess.Popen, grace_s: float) -> None:
    """Wait `grace_s` for the child to exit by itself, then SIGTERM (15 s), then SIGKILL."""
    for sig, wait_s in ((None, grace_s), (signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        if sig is not None:
            proc.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)


async def _lag_zero(settings: Settings, group: str, timeout_s: float = 10.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    while True:
        lag = await group_lag(settings, group, settings.telemetry_topic)
        if lag == 0 or time.monotonic() > deadline:
            return lag
        await asyncio.sleep(0.5)


async def measure(
    variant: str, settings: Settings, warmup: int, n: int, workdir: Path, timeout_s: float = 300.0
) -> dict:
    """One Kafka variant in a child process with its own consumer group; see the module docstring."""
    group = f"bench-{variant}-{uuid.uuid4().hex[:8]}"
    s = settings.model_copy(
        update={"streams": settings.streams.model_copy(update={"app_id": group, "data_dir": workdir / group})}
    )
    result, log = workdir / f"{group}.json", workdir / f"{group}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env["PYTHONPATH"] = str(ROOT)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.streams_child",
                variant,
                str(result),
                str(warmup),
                str(n),
                s.model_dump_json(),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not result.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited {proc.returncode}" if proc.poll() is not None else f"no result in {timeout_s:.0f} s"
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise RuntimeError(f"{variant} child {why}:\n{tail}")
            await asyncio.sleep(0.1)
        out = json.loads(result.read_text())
        out["lag"] = await _lag_zero(s, group)
    finally:
        await stop_child(proc, grace_s=10.0 if variant == "aiokafka" else 0.0)
    return out


def measure_step(values: list[bytes], warmup: int, rules) -> tuple[dict, dict]:
    """(d) SnapshotProcessor.step over decoded snapshots, and (d') the decode alone, timed after `warmup`
    snapshots (messages of either version: a bundle decodes into its parts)."""
    first = list(itertools.accumulate(map(snapshots_in, values))).index(warmup) + 1 if warmup else 0
    head = [s for v in values[:first] for s in decode_message(v)]  # type: ignore[union-attr]
    t0, c0 = time.perf_counter(), time.process_time()
    decoded = [decode_message(v) for v in values[first:]]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    snapshots = [s for parts in decoded for s in parts]  # type: ignore[union-attr]
    n = len(snapshots)
    decode = timing(n, wall, cpu)
    snapshots = head + snapshots
    processor, store = SnapshotProcessor(rules), MemoryStateStore()
    for i, snap in enumerate(snapshots):
        if i == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        step = processor.step(store.get(snap.node), snap)
        if step.changed:
            store[snap.node] = step.state
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return timing(n, wall, cpu), decode


async def run(
    n: int = 4096,
    reps: int = 3,
    variants: tuple[str, ...] = VARIANTS,
    nodes: int = NODES,
    warmup: int | None = None,
    bundle: bool = False,
    nvml: bool = False,
) -> dict:
    """`bundle`: the messages as an agent with ``publish.bundle`` sends them (a node's tick in one message);
    `nvml`: every node also runs the NVML collector at 1 s. Counts, warm-up and rates are in snapshots."""
    warmup = warmup or nodes * 4  # one fleet tick
    messages = fleet_messages(warmup + n, nodes, nvml=nvml)
    if bundle:
        messages = bundled(messages)
    runs: dict[str, list[dict]] = {v: [] for v in (*variants, *(["decode"] if "step" in variants else []))}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        settings = Settings(
            broker=broker.url,
            topic_prefix=f"bench{uuid.uuid4().hex[:6]}.",
            rules_dir=RULES,
            streams={"data_dir": Path(tmp)},
        )
        await ensure_topics(settings)
        await produce(settings, messages)
        rules = load_rules(RULES)
        for rep in range(reps):
            for variant in variants:
                if variant == "step":
                    step, decode = measure_step([v for _, v in messages], warmup, rules)
                    runs["step"].append(step)
                    runs["decode"].append(decode)
                else:
                    runs[variant].append(await measure(variant, settings, warmup, n, Path(tmp)))
                print(
                    f"  rep {rep + 1}/{reps} {variant}: {runs[variant][-1]['rate']:,.0f} snapshots/s", file=sys.stderr
                )
        partitions = settings.partitions
    sizes = [len(v) for _, v in messages]
    return {
        "n": n,
        "warmup": warmup,
        "nodes": nodes,
        "reps": reps,
        "partitions": partitions,
        "mean_bytes": statistics.mean(sizes),
        "runs": runs,
        "bundle": bundle,
        "nvml": nvml,
        "messages": len(sizes),
    }


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(result: dict) -> str:
    runs = result["runs"]
    ref = _median(runs["faust"], "rate") if runs.get("faust") else None
    ref_cpu = _median(runs["faust"], "cpu_rate") if runs.get("faust") else None
    shape = (
        f"{'bundled: one message per node and tick, ' if result.get('bundle') else ''}"
        f"{result.get('messages', result['n'] + result['warmup']):,} messages"
    )
    lines = [
        f"{result['n']:,} snapshots measured after {result['warmup']} warm-up ({result['nodes']} nodes x vllm + "
        f"dcgm + node + blackbox{' + nvml at 1 s' if result.get('nvml') else ''}, {shape}, "
        f"{result['mean_bytes'] / 1024:.1f} KB JSON a message on average, lz4, "
        f"{result['partitions']} partitions); medians of {result['reps']}.",
        "",
        "| consumer | snapshots/s | runs (snapshots/s) | window (s) | stalled (s) | CPU (% of one core) "
        "| per CPU-second | vs (b) | vs (b) per CPU-second | lag after |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, rs in runs.items():
        if not rs:
            continue
        rate = _median(rs, "rate")
        each = ", ".join(f"{r['rate']:,.0f}" for r in rs)
        vs = "-" if not ref else f"{rate / ref:.0f}x" if rate >= 10 * ref else f"{rate / ref:.2f}x"
        lags = [r["lag"] for r in rs]
        lag = "-" if variant in ("step", "decode") else ("?" if None in lags else str(max(lags)))
        cpu_rate = _median(rs, "cpu_rate")
        vs_cpu = (
            "-"
            if not ref_cpu
            else f"{cpu_rate / ref_cpu:.0f}x"
            if cpu_rate >= 10 * ref_cpu
            else f"{cpu_rate / ref_cpu:.2f}x"
        )
        lines.append(
            f"| {LABELS[variant]} | {rate:,.0f} | {each} | {_median(rs, 'wall_s'):.2f} "
            f"| {_median(rs, 'stalled_s'):.2f} | {_median(rs, 'cpu_pct'):.0f} | {cpu_rate:,.0f} | {vs} "
            f"| {vs_cpu} | {lag} |"
        )
    if ref and runs.get("tailhound"):
        ratio = _median(runs["tailhound"], "rate") / ref
        lines += ["", f"(c)/(b) = **{ratio:.0%}** (target >= 50%: {'met' if ratio >= 0.5 else 'not met'})"]
        cpu_ratio = _median(runs["tailhound"], "cpu_rate") / ref_cpu
        lines.append(f"per CPU-second (both busy): (c)/(b) = **{cpu_ratio:.0%}**")
        if runs.get("faust-json"):
            ratio = _median(runs["tailhound"], "rate") / _median(runs["faust-json"], "rate")
            cpu_ratio = _median(runs["tailhound"], "cpu_rate") / _median(runs["faust-json"], "cpu_rate")
            lines.append(f"(c)/(b') = **{ratio:.0%}**; per CPU-second **{cpu_ratio:.0%}**")
    return "\n".join(lines)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m bench.streams_throughput",
        description=f"profile the Kafka children with {PROFILE_ENV}=DIR ({PROFILE_MODE_ENV}=sections|cpu|wall)",
    )
    ap.add_argument("n", type=int, nargs="?", default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    ap.add_argument("--bundle", action="store_true", help="one message per node and tick (telemetry version 2)")
    ap.add_argument("--nvml", action="store_true", help="every node also runs the NVML collector at 1 s")
    a = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        print(
            report(
                asyncio.run(
                    run(n=a.n, reps=a.reps, variants=tuple(a.variants.split(",")), bundle=a.bundle, nvml=a.nvml)
                )
            )
        )


if __name__ == "__main__":
    main()
