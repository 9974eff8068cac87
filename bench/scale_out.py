"""Scale out (issue 16): the real worker with 1, 2 and 3 processes in one consumer group, same input, same
partitions.

Method: a simulated fleet (:func:`bench.fleet_telemetry.fleet_messages`: vLLM + dcgm-exporter + node_exporter
+ blackbox at 15 s, a thermal fault) is cut into `n` telemetry messages. For each worker count, in fresh topics
with `partitions` partitions: the workers (``python -m tailhound worker``, default rules, notifier off, each its
own data directory) start and are awaited until every one answers ``/-/ready``; then the messages are produced
at once (a backlog) and the clock runs until the group has committed all of them. Reported per run: snapshots
per second of that window (what the group did), snapshots per CPU-second (the workers' utime + stime over the
window, added up: the per-worker cost, which does not depend on how many cores the machine has), and how the
partitions' messages were split (each worker's share of the CPU time). Worker counts are interleaved within
each repetition; medians.

On a 2-core machine 3 workers cannot be faster than 2; the point is that the per-snapshot cost does not grow with
the group, so on a machine with C cores the group does about min(workers, C) x the per-CPU-second rate.

``python -m bench.scale_out [--n 4096] [--reps 2] [--workers 1,2,3] [--partitions 6]``
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from tailhound.broker import EmbeddedBroker
from tailhound.kafka import ensure_topics, group_lag
from tailhound.settings import Settings
from tailhound.worker.process import WorkerProcess

from .fleet_telemetry import RULES, fleet_messages, produce

NODES = 24
CLK_TCK = 100.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (seconds)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _ready(log: Path) -> bool:
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.findall(r"worker endpoint on 127\.0\.0\.1:(\d+)", text)
    if not found:
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{found[-1]}/-/ready", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


async def measure(
    broker_url: str,
    messages: list[tuple[bytes, bytes]],
    workers: int,
    partitions: int,
    workdir: Path,
    timeout_s: float = 600.0,
) -> dict:
    run = uuid.uuid4().hex[:6]
    settings = Settings(
        broker=broker_url,
        topic_prefix=f"so{run}.",
        partitions=partitions,
        rules_dir=RULES,
        sinks={"console": {"enabled": False}, "incident_topic": {"enabled": True}},
        notifier={"enabled": False},
        streams={
            "app_id": f"so-{run}",
            "data_dir": workdir / run,
            "web_listen": "127.0.0.1:0",
            "log_level": "info",
            "rules_watch_s": 0,
        },
    )
    await ensure_topics(settings)
    procs = []
    for i in range(workers):
        s = settings.model_copy(deep=True)
        s.streams.data_dir = workdir / run / f"w{i}"
        procs.append(WorkerProcess(s, workdir / f"{run}-w{i}.log"))
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 180
        while not all(_ready(p.log_path) for p in procs):
            if time.monotonic() > deadline or not all(p.alive() for p in procs):
                raise RuntimeError("workers not ready:\n" + "\n".join(p.log_tail() for p in procs))
            await asyncio.sleep(0.5)
        cpu0 = [cpu_seconds(p.proc.pid) for p in procs]
        t0 = time.monotonic()
        await produce(settings, messages)
        deadline = t0 + timeout_s
        while (lag := await group_lag(settings, settings.streams.app_id, settings.telemetry_topic)) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"lag {lag} after {timeout_s:.0f} s")
            await asyncio.sleep(0.25)
        wall = time.monotonic() - t0
        cpu = [cpu_seconds(p.proc.pid) - c for p, c in zip(procs, cpu0, strict=True)]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.stop()
    n = len(messages)
    return {
        "workers": workers,
        "partitions": partitions,
        "n": n,
        "wall_s": wall,
        "rate": n / wall,
        "cpu_s": sum(cpu),
        "cpu_rate": n / sum(cpu) if sum(cpu) else 0.0,
        "cpu_share": [round(c / sum(cpu), 2) if sum(cpu) else 0.0 for c in cpu],
    }


async def run(n: int = 4096, reps: int = 2, workers: tuple[int, ...] = (1, 2, 3), partitions: int = 6) -> dict:
    messages = fleet_messages(n, NODES)
    runs: dict[int, list[dict]] = {w: [] for w in workers}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-scale-") as tmp:
        for rep in range(reps):
            for w in workers:
                out = await measure(broker.url, messages, w, partitions, Path(tmp))
                runs[w].append(out)
                print(
                    f"  rep {rep + 1}/{reps} workers={w}: {out['rate']:,.0f} snapshots/s, "
                    f"{out['cpu_rate']:,.0f} per CPU-second, CPU shares {out['cpu_share']}",
                    file=sys.stderr,
                )
    return {"n": n, "reps": reps, "partitions": partitions, "nodes": NODES, "runs": runs}


def report(result: dict) -> str:
    lines = [
        f"{result['n']:,} snapshots ({result['nodes']} nodes), {result['partitions']} partitions, "
        f"{result['reps']} repetitions, medians",
        "",
        "| workers | snapshots/s (group) | runs | per CPU-second (all workers) | runs | CPU shares |",
        "|---:|---:|---|---:|---|---|",
    ]
    for w, outs in sorted(result["runs"].items()):
        rates, cpu = [o["rate"] for o in outs], [o["cpu_rate"] for o in outs]
        lines.append(
            f"| {w} | {statistics.median(rates):,.0f} | {', '.join(f'{r:,.0f}' for r in rates)} | "
            f"{statistics.median(cpu):,.0f} | {', '.join(f'{r:,.0f}' for r in cpu)} | "
            f"{'; '.join(str(o['cpu_share']) for o in outs)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--workers", default="1,2,3")
    p.add_argument("--partitions", type=int, default=6)
    args = p.parse_args(argv)
    result = asyncio.run(run(args.n, args.reps, tuple(int(w) for w in args.workers.split(",")), args.partitions))
    print(report(result))


if __name__ == "__main__":
    main()
