"""Peer benchmark (issue 30): Prometheus and the tailhound worker on the same generated fleet, nodes per core.

One fleet (:class:`~tailhound.agents.simulator.FleetSimulator`, ``nodes`` nodes: vLLM, dcgm-exporter with 8
GPUs, node_exporter and blackbox pages, every page new each round) goes two ways:

- **Prometheus** (Debian's, 2.42 here) scrapes the pages from a loopback server that hands each target its
  next round's page on every scrape, stores them (TSDB) and evaluates ``bench/peer_rules.yml`` (the PromQL
  equivalent of the default pack) every scrape round. The scrape interval is ``interval_s`` (shorter than
  15 s, so that a run takes seconds); every range, ``for`` and subquery step of the rule file is scaled by
  ``interval_s / 15``, so each window holds the samples it holds at 15 s. Measured: Prometheus' CPU time
  (utime + stime of its process, all threads, from /proc) over the scrapes after ``warm`` rounds.
- **tailhound**: the agent's snapshots of the same records (:class:`~tailhound.agents.snapshot_builder.SnapshotBuilder`,
  encoded as the agent's sender encodes them: :func:`~tailhound.agents.wire.encode_snapshot`) produced to
  the bundled broker and consumed by the real worker (default rules) in a child process:
  :func:`bench.streams_throughput.measure`, the worker's CPU over all but the first round. The **broker**'s
  CPU (its process, from /proc) is counted from the first produce to the worker's last commit: the
  telemetry in, the worker's fetches, its changelog and model-topic traffic. The **agent** figure is its
  snapshot pipeline and encoding in this process (CPU time, first round not timed; the HTTP scrape and the
  Kafka client are not in it).

Each figure is nodes per core at a 15 s scrape interval: ``node rounds x 15 s / CPU seconds``; medians of
``reps``. The two summary lines are ratios of nodes per core (higher is better for tailhound).
``make bench ARGS="--only peer"`` or ``python -m bench.peer [--nodes N] [--reps R]``; the agent side publishes as an
agent with default ``publish`` settings (version 3, a node's round in one message), ``--wire 1``, ``--no-bundle`` and
``--layout-every S`` change that.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from tailhound.agents.config import PublishConfig
from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.agents.wire import DEFAULT_WIRE, encoder
from tailhound.recording import ScrapeRecord

RULES = Path(__file__).with_name("peer_rules.yml")
JOBS = ("vllm", "dcgm", "node", "blackbox")
TICK_S = 15.0  # the scrape interval the figures are for
_DURATION = re.compile(r"(\d+)([smh])")
_UNITS = {"s": 1, "m": 60, "h": 3600}


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fleet(nodes: int, rounds: int) -> list[list[ScrapeRecord]]:
    """`rounds` rounds of every node's four pages, round by round."""
    sim = FleetSimulator(SimConfig(nodes=nodes, seed=3))
    out: list[list[ScrapeRecord]] = []
    for rec in iter_records(sim, rounds * TICK_S / 60):
        if not out or rec.ts != out[-1][0].ts:
            out.append([])
        out[-1].append(rec)
    return out[:rounds]


def scaled_rules(text: str, interval_s: float) -> str:
    """The rule file with every duration (ranges, subquery steps, ``for``) scaled from 15 s scrapes to `interval_s`."""
    factor = interval_s / TICK_S

    def ms(m: re.Match) -> str:
        return f"{max(1, round(int(m.group(1)) * _UNITS[m.group(2)] * factor * 1000))}ms"

    def window(m: re.Match) -> str:
        return "[" + _DURATION.sub(ms, m.group(1)) + "]"

    text = re.sub(r"\[([0-9smh:]+)\]", window, text)
    return re.sub(r"(for: )(\d+[smh])", lambda m: m.group(1) + _DURATION.sub(ms, m.group(2)), text)


class Pages:
    """Each target's pages, one round per scrape (the last one again once they run out), and scrapes served."""

    def __init__(self, rounds: list[list[ScrapeRecord]]) -> None:
        self.bodies: dict[tuple[str, str], list[bytes]] = {}
        for batch in rounds:
            for rec in batch:
                self.bodies.setdefault((rec.node, rec.job), []).append(rec.body.encode())
        self.turn: dict[tuple[str, str], int] = {}
        self.served = 0

    async def handle(self, request):  # aiohttp's request and response
        from aiohttp import web

        key = (request.match_info["node"], request.match_info["job"])
        pages = self.bodies.get(key)
        if pages is None:
            raise web.HTTPNotFound()
        k = self.turn.get(key, 0)
        self.turn[key] = k + 1
        self.served += 1
        return web.Response(body=pages[min(k, len(pages) - 1)], content_type="text/plain")


def prometheus_config(port: int, nodes: list[str], interval_s: float, rules: Path) -> str:
    from tests.ingest.prometheus_proc import page_jobs

    every = f"{round(interval_s * 1000)}ms"
    return (
        f"global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n  evaluation_interval: {every}\n"
        f"rule_files: [{rules}]\nscrape_configs:{page_jobs(port, nodes, JOBS)}\n"
    )


async def run_prometheus(rounds: list[list[ScrapeRecord]], interval_s: float, warm: int, workdir: Path) -> dict:
    """Prometheus scraping the fleet's pages and evaluating the rule file; its CPU over the rounds after `warm`."""
    from aiohttp import web

    from tests.ingest.capture_fixture import free_port
    from tests.ingest.prometheus_proc import Prometheus

    pages = Pages(rounds)
    nodes = sorted({node for node, _ in pages.bodies})
    targets = len(pages.bodies)
    app = web.Application()
    app.router.add_get("/{node}/{job}", pages.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    workdir.mkdir(parents=True, exist_ok=True)
    rules = workdir / "rules.yml"
    rules.write_text(scaled_rules(RULES.read_text(), interval_s))
    prom = Prometheus(workdir, prometheus_config(port, nodes, interval_s, rules))
    try:
        await prom.start()
        deadline = time.monotonic() + 60 + 3 * len(rounds) * interval_s  # bounded however slow the machine
        while pages.served < warm * targets and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        cpu0, served0 = cpu_seconds(prom.proc.pid), pages.served
        while pages.served < (len(rounds) - 1) * targets and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        cpu1, served1 = cpu_seconds(prom.proc.pid), pages.served
        evals = await own_metric(
            prom.url, ("prometheus_rule_evaluations_total", "prometheus_rule_evaluation_failures_total")
        )
        up = await prom.query("avg(up)")  # scrapes that timed out on a busy machine would show here
    finally:
        await prom.stop()
        await runner.cleanup()
    node_rounds = (served1 - served0) / len(JOBS)
    cpu = cpu1 - cpu0
    return {
        "cpu_s": cpu,
        "node_rounds": node_rounds,
        "nodes_per_core": TICK_S * node_rounds / cpu if cpu else 0.0,
        "rule_evaluations": evals[0],
        "rule_failures": evals[1],
        "up": float(up[0]["value"][1]) if up else 0.0,
    }


async def own_metric(url: str, names: tuple[str, ...]) -> list[float]:
    """The sum of each of Prometheus' own counters `names`, from its /metrics (it does not scrape itself here)."""
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r,
    ):
        text = await r.text()
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return [sums[n] for n in names]


#: the telemetry wire version and layout interval the run encodes with (``--wire``, ``--layout-every``)
WIRE = {"version": DEFAULT_WIRE, "layout_every_s": PublishConfig().layout_every_s}
#: ``--bundle`` / ``--no-bundle``: a node's snapshots of one round in one message, as an agent with
#: ``publish.bundle`` sends them; None: as the agent's default (on with wire 3)
BUNDLE: dict[str, bool | None] = {"on": None}


def snapshot_messages(rounds: list[list[ScrapeRecord]]) -> list[tuple[bytes, bytes]]:
    builder, encode = SnapshotBuilder(), encoder(**WIRE)
    messages = [(s.key(), encode(s)) for b in rounds for s in map(builder.build, b)]
    if not (BUNDLE["on"] if BUNDLE["on"] is not None else WIRE["version"] == 3):
        return messages
    from tailhound.agents.buffer import Message
    from tailhound.agents.sender import bundle_batch

    return [(m.key, m.value) for m in bundle_batch([Message(key=k, value=v) for k, v in messages])]


def run_agent(rounds: list[list[ScrapeRecord]]) -> dict:
    """The agent's snapshot pipeline and encoding over every round but the first (not timed)."""
    builder, encode_snapshot = SnapshotBuilder(), encoder(**WIRE)
    for rec in rounds[0]:
        encode_snapshot(builder.build(rec))
    t0 = time.process_time()
    for batch in rounds[1:]:
        for rec in batch:
            encode_snapshot(builder.build(rec))
    cpu = time.process_time() - t0
    node_rounds = sum(len(b) for b in rounds[1:]) / len(JOBS)
    return {"cpu_s": cpu, "node_rounds": node_rounds, "nodes_per_core": TICK_S * node_rounds / cpu if cpu else 0.0}


async def run_worker(rounds: list[list[ScrapeRecord]], workdir: Path) -> tuple[dict, dict]:
    """The worker (default rules) on the fleet's snapshots through the bundled broker: (worker, broker)."""
    from bench.fleet_telemetry import RULES as PACK
    from bench.fleet_telemetry import produce
    from bench.streams_throughput import measure
    from tailhound.broker import EmbeddedBroker
    from tailhound.kafka import ensure_topics
    from tailhound.settings import Settings

    messages = snapshot_messages(rounds)
    warmup, snapshots = len(rounds[0]), sum(map(len, rounds))  # (the child counts snapshots, not messages)
    workdir.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker() as broker:
        settings = Settings(
            broker=broker.url,
            topic_prefix=f"peer{uuid.uuid4().hex[:6]}.",
            rules_dir=PACK,
            streams={"data_dir": workdir},
        )
        await ensure_topics(settings)
        b0 = cpu_seconds(broker.pid)
        await produce(settings, messages)
        out = await measure("tailhound", settings, warmup, snapshots - warmup, workdir)
        b1 = cpu_seconds(broker.pid)
    worker_rate = out["cpu_rate"]  # snapshots per CPU-second of the worker
    worker = {
        "cpu_s": (snapshots - warmup) / worker_rate if worker_rate else 0.0,
        "node_rounds": (snapshots - warmup) / len(JOBS),
        "nodes_per_core": worker_rate * TICK_S / len(JOBS),
    }
    node_rounds = snapshots / len(JOBS)
    broker_out = {
        "cpu_s": b1 - b0,
        "node_rounds": node_rounds,
        "nodes_per_core": TICK_S * node_rounds / (b1 - b0) if b1 > b0 else 0.0,
    }
    return worker, broker_out


async def run(
    nodes: int = 100, rounds: int = 24, interval_s: float = 2.0, warm: int = 4, reps: int = 3, worker: bool = True
) -> dict:
    """Prometheus, agent, worker and broker on the same fleet, `reps` times (interleaved)."""
    fleet_rounds = fleet(nodes, rounds)
    runs: dict[str, list[dict]] = {"prometheus": [], "agent": [], "worker": [], "broker": []}
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="tailhound-peer-") as tmp:
            runs["prometheus"].append(await run_prometheus(fleet_rounds, interval_s, warm, Path(tmp) / "prom"))
            runs["agent"].append(run_agent(fleet_rounds))
            if worker:
                w, b = await run_worker(fleet_rounds, Path(tmp) / "worker")
                runs["worker"].append(w)
                runs["broker"].append(b)
    return {
        "nodes": nodes,
        "rounds": rounds,
        "interval_s": interval_s,
        "reps": reps,
        "runs": runs,
        "rules": sum(1 for line in RULES.read_text().splitlines() if line.strip().startswith("- alert:")),
    }


LABELS = {
    "prometheus": "Prometheus (scrape + TSDB + {rules} PromQL rules)",
    "worker": "tailhound worker (default rules)",
    "broker": "bundled broker (Tansu), telemetry in + worker traffic",
    "agent": "agent snapshot pipeline + encode (no HTTP, no Kafka client)",
}


def medians(result: dict) -> dict[str, float]:
    return {k: statistics.median(r["nodes_per_core"] for r in rs) for k, rs in result["runs"].items() if rs}


def report(result: dict) -> str:
    npc = medians(result)
    lines = [
        f"{result['nodes']} nodes x vllm + dcgm (8 GPUs) + node + blackbox; Prometheus scraping every "
        f"{result['interval_s']:g} s (rule windows scaled to 15 s scrapes); medians of {result['reps']}.",
        "",
        "| process | CPU seconds | node rounds | nodes per core at 15 s | runs |",
        "|---|---:|---:|---:|---|",
    ]
    for key, rs in result["runs"].items():
        if not rs:
            continue
        each = ", ".join(f"{r['nodes_per_core']:,.0f}" for r in rs)
        lines.append(
            f"| {LABELS[key].format(rules=result['rules'])} | "
            f"{statistics.median(r['cpu_s'] for r in rs):.2f} | "
            f"{statistics.median(r['node_rounds'] for r in rs):,.0f} | **{npc[key]:,.0f}** | {each} |"
        )
    prom = npc.get("prometheus")
    if prom and npc.get("worker"):
        lines.append("")
        lines.append(f"worker / Prometheus: {npc['worker'] / prom:.2f}x")
        if npc.get("broker"):
            both = 1 / (1 / npc["worker"] + 1 / npc["broker"])
            lines.append(f"worker + broker / Prometheus: {both / prom:.2f}x")
    failures = sum(r["rule_failures"] for r in result["runs"]["prometheus"])
    evals = sum(r["rule_evaluations"] for r in result["runs"]["prometheus"])
    up = min(r.get("up", 1.0) for r in result["runs"]["prometheus"])
    lines.append(
        f"\nPrometheus rule evaluations: {evals:,.0f}, failed: {failures:,.0f}; targets up at the end: "
        f"{up:.0%} (lowest run)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--interval", type=float, default=2.0, help="Prometheus' scrape interval in the run (s)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--wire", type=int, default=DEFAULT_WIRE, choices=(1, 3), help="telemetry version the agent sends")
    ap.add_argument(
        "--layout-every",
        type=float,
        default=WIRE["layout_every_s"],
        help="v3 layout references: full layout every N s (default: the agent's publish.layout_every_s; 0: off)",
    )
    ap.add_argument("--bundle", action="store_const", const=True, help="a node's snapshots of a round in one message")
    ap.add_argument("--no-bundle", dest="bundle", action="store_const", const=False, help="one message per snapshot")
    a = ap.parse_args()
    WIRE.update(version=a.wire, layout_every_s=a.layout_every)
    BUNDLE["on"] = a.bundle
    print(report(asyncio.run(run(a.nodes, a.rounds, a.interval, reps=a.reps))))
