"""Table store (``streams.store``, issue 16): worker throughput, recovery time and memory, memory vs rocksdb.

Two measurements on the bundled broker:

- ``throughput``: the real worker (variant (c) of :mod:`bench.streams_throughput`, same fleet, same window,
  same child harness) with ``store: memory``, ``store: rocksdb``, and ``rocksdb-decode``: rocksdb with
  :class:`tailhound.streams.table_store.StateStore`'s read-back shortcut switched off in the child, so
  every table read decodes the node's JSON state (what Faust's RocksDB store does by itself);
- ``recovery``: the ``node-state`` changelog is filled with ``nodes`` states (a real ~25 KB state of the
  simulated fleet, one copy per node name, keyed and partitioned as the worker writes them), then a
  ``tailhound worker`` (:class:`tailhound.worker.process.WorkerProcess`) is started and timed from its
  start until its log says Faust's "Worker ready" (what ``GET /-/ready`` reports), and in its log from its
  partition assignment to Faust's "Worker ready" (the recovery alone); its RSS is read 1 s after ready.
  Per store: ``memory`` (reads the whole changelog), ``rocksdb-cold`` (empty data_dir: reads the whole
  changelog into RocksDB) and ``rocksdb-warm`` (restart on the data_dir the cold run left: opens the
  databases, reads nothing). ``nodes=0`` is the start-up cost without state.

``python -m bench.table_store [--nodes 0,1000,10000] [--reps 3] [--n 2048] [--only recovery|throughput]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from aiokafka.partitioner import DefaultPartitioner

from bench import fleet_telemetry as fleet
from bench import streams_child
from bench.streams_throughput import stop_child
from tailhound.broker import EmbeddedBroker, _die_with_parent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.settings import Settings
from tailhound.streams.codec import StateCodec, decode_snapshot
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.worker.process import WorkerProcess

STORES = {"memory": "memory", "rocksdb": "rocksdb", "rocksdb-decode": "rocksdb"}


# --- throughput --------------------------------------------------------------------------------------
def child(variant: str, *args: str) -> None:
    """A bench.streams_child child for the ``tailhound`` variant; ``rocksdb-decode`` without the shortcut."""
    if variant == "rocksdb-decode":
        from faust.stores.base import SerializedStore

        from tailhound.streams.table_store import StateStore

        StateStore.__getitem__ = SerializedStore.__getitem__  # type: ignore[method-assign]
    streams_child.child_main("tailhound", *args)


async def measure_worker(variant: str, settings: Settings, warmup: int, n: int, workdir: Path) -> dict:
    group = f"bench-{variant}-{uuid.uuid4().hex[:8]}"
    s = settings.model_copy(
        update={
            "streams": settings.streams.model_copy(
                update={"app_id": group, "data_dir": workdir / group, "store": STORES[variant]}
            )
        }
    )
    result, log = workdir / f"{group}.json", workdir / f"{group}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")} | {"PYTHONPATH": str(fleet.ROOT)}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.table_store",
                "child",
                variant,
                str(result),
                str(warmup),
                str(n),
                s.model_dump_json(),
            ],
            cwd=fleet.ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    try:
        deadline = time.monotonic() + 300
        while not result.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{variant} child failed:\n{log.read_text(errors='replace')[-2000:]}")
            await asyncio.sleep(0.1)
        return json.loads(result.read_text())
    finally:
        await stop_child(proc, grace_s=0.0)


async def throughput(n: int, reps: int) -> dict[str, list[dict]]:
    warmup = fleet.NODES * 4
    messages = fleet.fleet_messages(warmup + n)
    runs: dict[str, list[dict]] = {v: [] for v in STORES}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        settings = Settings(broker=broker.url, topic_prefix=f"bench{uuid.uuid4().hex[:6]}.", rules_dir=fleet.RULES)
        await ensure_topics(settings)
        await fleet.produce(settings, messages)
        for rep in range(reps):
            for variant in STORES:
                runs[variant].append(await measure_worker(variant, settings, warmup, n, Path(tmp)))
                rate = runs[variant][-1]["rate"]
                print(f"  rep {rep + 1}/{reps} {variant}: {rate:,.0f} snapshots/s", file=sys.stderr)
    return runs


# --- recovery ----------------------------------------------------------------------------------------
def sample_state() -> dict:
    """A node's stored state after ~10 minutes of the simulated fleet (the largest of its nodes)."""
    processor, store = SnapshotProcessor(load_rules(fleet.RULES)), MemoryStateStore()
    for _, value in fleet.fleet_messages(fleet.NODES * 4 * 40):
        snap = decode_snapshot(value)
        step = processor.step(store.get(snap.node), snap)
        if step.changed:
            store[snap.node] = step.state
    return max((raw for _, raw in store.items()), key=lambda raw: len(json.dumps(raw)))


async def fill_changelog(settings: Settings, nodes: int, state: dict) -> int:
    """`nodes` states in the node-state changelog, keyed and partitioned as the worker writes them; bytes."""
    topic = f"{settings.streams.app_id}-node-state-changelog"
    codec, partitioner, parts = StateCodec(), DefaultPartitioner(), list(range(settings.partitions))
    producer = make_producer(settings, compression_type="lz4")
    await producer.start()
    size = 0
    try:
        futures = []
        for i in range(nodes):
            node = f"node-{i:05d}"
            value = codec._dumps(state | {"node": node, "partition": partitioner(node.encode(), parts, parts)})
            size += len(value)
            futures.append(
                await producer.send(
                    topic,
                    key=json.dumps(node).encode(),
                    value=value,
                    partition=partitioner(node.encode(), parts, parts),
                )
            )
        await asyncio.gather(*futures)
        for p in parts:  # one single-record batch last on every partition (the bundled broker's end offsets)
            await producer.send_and_wait(topic, key=b'"~end"', value=None, partition=p)
    finally:
        await producer.stop()
    return size


def _rss_mb(pid: int) -> float:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024


def _stamp(line: str) -> float:
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def recovery_s(log: Path) -> float | None:
    """From the worker's log: its last partition assignment to Faust's "Worker ready" (table recovery alone,
    without the process start and the group join)."""
    assigned = None
    for line in log.read_text(errors="replace").splitlines():
        if "Executing _on_partitions_assigned" in line:
            assigned = _stamp(line)
        elif "[^---Recovery]: Worker ready" in line and assigned is not None:
            return _stamp(line) - assigned
    return None


def start_until_ready(settings: Settings, log: Path, timeout_s: float = 600.0) -> dict:
    """Start a worker, time it to Faust's "Worker ready" in its log (what ``/-/ready`` reports: the tables are
    recovered), read its RSS 1 s later, stop it (SIGTERM)."""
    worker = WorkerProcess(settings, log)
    t0 = time.monotonic()
    worker.start()
    try:
        while "[^---Recovery]: Worker ready" not in (log.read_text(errors="replace") if log.exists() else ""):
            if not worker.alive() or time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"worker not ready:\n{worker.log_tail(30)}")
            time.sleep(0.05)
        ready_s = time.monotonic() - t0
        time.sleep(1.0)
        return {"ready_s": ready_s, "recovery_s": recovery_s(log), "rss_mb": _rss_mb(worker.proc.pid)}
    finally:
        worker.proc.send_signal(signal.SIGTERM)
        worker.stop(timeout=30)


async def recovery(sizes: list[int], reps: int) -> dict:
    state = sample_state()
    out: dict = {"state_bytes": len(StateCodec()._dumps(state)), "runs": {}}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        for nodes in sizes:
            run = uuid.uuid4().hex[:6]
            settings = Settings(
                broker=broker.url,
                topic_prefix=f"rec{run}.",
                rules_dir=fleet.RULES,
                streams={"app_id": f"rec-{run}", "log_level": "info"},
                notifier={"api_listen": "127.0.0.1:0"},
            )
            await ensure_topics(settings)
            boot = settings.model_copy(
                update={"streams": settings.streams.model_copy(update={"data_dir": Path(tmp) / f"boot-{run}"})}
            )
            start_until_ready(boot, Path(tmp) / f"boot-{run}.log")  # declares the changelog topics
            out.setdefault("changelog_mb", {})[nodes] = await fill_changelog(settings, nodes, state) / 1e6
            for rep in range(reps):
                rocks = Path(tmp) / f"rocks-{run}-{rep}"
                for kind, store, data_dir in (
                    ("memory", "memory", Path(tmp) / f"mem-{run}-{rep}"),
                    ("rocksdb-cold", "rocksdb", rocks),
                    ("rocksdb-warm", "rocksdb", rocks),
                ):
                    s = settings.model_copy(
                        update={"streams": settings.streams.model_copy(update={"store": store, "data_dir": data_dir})}
                    )
                    got = start_until_ready(s, Path(tmp) / f"{kind}-{run}-{rep}.log")
                    out["runs"].setdefault((nodes, kind), []).append(got)
                    print(
                        f"  {nodes} nodes rep {rep + 1}/{reps} {kind}: ready in {got['ready_s']:.1f} s "
                        f"(recovery {got['recovery_s'] or 0:.2f} s), "
                        f"RSS {got['rss_mb']:.0f} MB",
                        file=sys.stderr,
                    )
    return out


# --- report ------------------------------------------------------------------------------------------
def report(thr: dict | None, rec: dict | None) -> str:
    lines = []
    if thr:
        lines += ["| worker, store | snapshots/s (median) | runs | per CPU-second |", "|---|---:|---|---:|"]
        for variant, rs in thr.items():
            lines.append(
                f"| {variant} | {statistics.median(r['rate'] for r in rs):,.0f} | "
                f"{', '.join(format(r['rate'], ',.0f') for r in rs)} | "
                f"{statistics.median(r['cpu_rate'] for r in rs):,.0f} |"
            )
    if rec:
        lines += [
            "",
            f"state: {rec['state_bytes'] / 1024:.1f} KB per node",
            "",
            "| nodes (changelog) | start | ready after (s, median) | runs (s) | recovery (s, median) "
            "| runs (s) | RSS at ready (MB, median) |",
            "|---|---|---:|---|---:|---|---:|",
        ]
        for (nodes, kind), rs in rec["runs"].items():
            mb = rec["changelog_mb"][nodes]
            lines.append(
                f"| {nodes:,} ({mb:,.0f} MB) | {kind} | {statistics.median(r['ready_s'] for r in rs):.1f} | "
                f"{', '.join(format(r['ready_s'], '.1f') for r in rs)} | "
                f"{statistics.median(r['recovery_s'] or 0 for r in rs):.2f} | "
                f"{', '.join(format(r['recovery_s'] or 0, '.2f') for r in rs)} | "
                f"{statistics.median(r['rss_mb'] for r in rs):.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.table_store", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="0,1000,10000", help="changelog sizes for the recovery runs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=2048, help="snapshots measured per throughput run")
    ap.add_argument("--only", choices=("recovery", "throughput"))
    a = ap.parse_args(argv)
    thr = asyncio.run(throughput(a.n, a.reps)) if a.only != "recovery" else None
    rec = asyncio.run(recovery([int(x) for x in a.nodes.split(",")], a.reps)) if a.only != "throughput" else None
    print(report(thr, rec))


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(*sys.argv[2:7])
    else:
        main()
