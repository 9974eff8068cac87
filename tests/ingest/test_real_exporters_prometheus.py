"""Debian's real exporters through Debian's real Prometheus: node_exporter (default flags) and blackbox_exporter
(its packaged modules, probing a loopback HTTP server) scraped by Prometheus, which remote-writes them to the
ingest through the printed relabel block and serves them on /federate. Every catalog signal the exporters' default
flags give arrives by both paths, the same signals the agent's own scrapes of the same exporters give, with no
reject; Prometheus' own job sends nothing; `tailhound doctor` names the signals the defaults leave out, with the
flag to add, and says nothing of them once the flag is set.

Short by default (until every path has every signal, at most ~40 s); ``TAILHOUND_LONG_DRILLS=1`` keeps it running
for a minute and checks that every node_exporter snapshot of it is whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time

import pytest
import yaml
from aiohttp import web

from tailhound.agents.collectors import CollectError
from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.catalog.fixes import default_fixbook
from tailhound.doctor.observed import collect_targets
from tailhound.doctor.prometheus import observe_prometheus
from tailhound.doctor.report import diagnose, render_table
from tailhound.ingest.config import IngestServiceConfig
from tailhound.ingest.federation import FederationConfig, FederationPuller
from tailhound.ingest.prometheus_snippet import write_relabel_configs
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tailhound.resources import default_rules_dir
from tailhound.snapshot import Snapshot
from tailhound.streams.coverage import signals_of_metrics
from tailhound.streams.ruleset.rulefile import load_rules
from tests.conftest import require_tool
from tests.exporters import NODE_EXPORTER_INSTALL, running, start_blackbox_exporter, start_node_exporter
from tests.http_helpers import serve_app
from tests.ingest.prometheus_proc import Prometheus

pytestmark = pytest.mark.slow
LONG = os.environ.get("TAILHOUND_LONG_DRILLS", "") not in ("", "0", "false")
CATALOG = default_catalog()
NETSTAT = default_fixbook().flags["node"][0]
#: what the default flags cannot give (the netstat fields node_exporter leaves out)
FLAG_ONLY = {spec.name for spec, _ in (v for m in NETSTAT.metrics for v in CATALOG.by_metric[("node", m)])}
EXPECTED = {spec.name for spec in CATALOG.signals.values() if {"node", "blackbox"} & set(spec.sources)} - FLAG_ONLY


def signals_by_source(snapshots: list[Snapshot]) -> set[str]:
    names: dict[str, set[str]] = {}
    for s in snapshots:
        if s.error is None:
            names.setdefault(s.source, set()).update(x.name for x in s.samples)
    return set(signals_of_metrics(names, CATALOG))


def prometheus_yml(node_port: int, blackbox_port: int, probed: str, ingest_port: int, self_port: int) -> str:
    rw = {
        "url": f"http://127.0.0.1:{ingest_port}/api/v1/write",
        "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms", "max_backoff": "1s"},
        "metadata_config": {"send": True, "send_interval": "5s"},
        "write_relabel_configs": write_relabel_configs(IngestServiceConfig()),
    }
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{node_port}"]}]},
            {
                "job_name": "blackbox",
                "metrics_path": "/probe",
                "params": {"module": ["http_2xx"]},
                "static_configs": [{"targets": [probed]}],
                "relabel_configs": [
                    {"source_labels": ["__address__"], "target_label": "__param_target"},
                    {"source_labels": ["__param_target"], "target_label": "instance"},
                    {"target_label": "__address__", "replacement": f"127.0.0.1:{blackbox_port}"},
                ],
            },
            # an unrelated job: its `up` must not become snapshots (nor be sent at all)
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{self_port}"]}]},
        ],
        "remote_write": [rw],
    }
    return yaml.safe_dump(config, sort_keys=False)


@contextlib.asynccontextmanager
async def remote_write_receiver(ingest: RemoteWriteIngest, received: list[Snapshot], rejects: list):
    """The ingest's receiver on loopback (no broker: the snapshots are kept in `received`)."""

    async def write(request: web.Request) -> web.Response:
        body = await request.read()
        result = ingest.accept(body, request.headers)
        received.extend(result.snapshots)
        rejects.extend(result.rejects)
        return web.Response(status=result.status, headers=result.headers, text=result.message or None)

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/api/v1/write", write)
    async with serve_app(app) as base:
        yield int(base.rsplit(":", 1)[1])


def probed_server() -> contextlib.AbstractAsyncContextManager[str]:
    """The loopback HTTP server blackbox_exporter probes."""

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/health", health)
    return serve_app(app)


async def agent_signals(urls: dict[str, str], until: float) -> set[str]:
    """The agent's path: its scrape collector and snapshot builder on the same exporters (a few scrapes)."""
    builder, got = SnapshotBuilder(CATALOG), []
    collectors = [ScrapeCollector(ScrapeTarget(job=job, url=url, timeout_s=5)) for job, url in urls.items()]
    try:
        while time.monotonic() < until:  # bounded by `until`
            for c in collectors:
                with contextlib.suppress(CollectError):
                    got += [builder.build(r) for r in await c.collect()]
            if signals_by_source(got) >= EXPECTED:
                break
            await asyncio.sleep(1)
    finally:
        for c in collectors:
            await c.close()
    return signals_by_source(got)


async def test_real_exporters_through_a_real_prometheus_by_remote_write_and_federation(tmp_path):
    received, rejects = [], []
    ingest = RemoteWriteIngest(IngestConfig.model_validate({"grouping": {"settle_s": 1}}))
    with (
        running(start_node_exporter(tmp_path / "node")) as node,
        running(start_blackbox_exporter(tmp_path / "blackbox")) as blackbox,
    ):
        async with probed_server() as probed, remote_write_receiver(ingest, received, rejects) as ingest_port:
            prometheus = Prometheus(tmp_path / "prometheus", "")
            (prometheus.workdir / "prometheus.yml").write_text(
                prometheus_yml(node.port, blackbox.port, f"{probed}/health", ingest_port, prometheus.port)
            )
            puller = FederationPuller(FederationConfig(url=prometheus.url, interval_s=1), catalog=CATALOG)
            pulled, pull_rejects = [], []
            await prometheus.start()
            try:
                deadline = time.monotonic() + (60 if LONG else 40)
                while time.monotonic() < deadline:  # bounded by the deadline
                    out = await puller.pull_once()
                    pulled += out.snapshots
                    pull_rejects += out.rejects
                    received += ingest.poll().snapshots
                    if not LONG and signals_by_source(received) >= EXPECTED <= signals_by_source(pulled):
                        break
                    await asyncio.sleep(1)
                agent = await agent_signals(
                    {
                        "node": f"{node.url}/metrics",
                        "blackbox": f"{blackbox.url}/probe?module=http_2xx&target={probed}/health",
                    },
                    time.monotonic() + 15,
                )
                seen = await observe_prometheus(prometheus.url, catalog=CATALOG, timeout_s=5)
            finally:
                await puller.close()
                await prometheus.stop()
    logs = (prometheus.log_tail(), ingest.stats)
    assert signals_by_source(received) == EXPECTED, (sorted(EXPECTED - signals_by_source(received)), logs)
    assert signals_by_source(pulled) == EXPECTED, (sorted(EXPECTED - signals_by_source(pulled)), puller.stats)
    assert agent == EXPECTED, sorted(EXPECTED ^ agent)
    assert rejects == [] and pull_rejects == [], (rejects[:3], pull_rejects[:3])
    # Prometheus' own job is no source: nothing of it was sent, pulled or made a snapshot
    assert {s.source for s in received} == {s.source for s in pulled} == {"node", "blackbox"}
    assert all(s.node == "127.0.0.1" for s in received + pulled)
    if LONG:  # a minute of scrapes: every node_exporter snapshot is whole
        node_metrics = {m for (src, m) in CATALOG.by_metric if src == "node"} - set(NETSTAT.metrics)
        for s in received + pulled:
            if s.source == "node" and s.error is None:
                assert node_metrics <= {x.name for x in s.samples}, (s.ts, node_metrics - {x.name for x in s.samples})
    # doctor --prometheus on the same Prometheus: the two netstat signals, with the flag to add
    table = render_table(diagnose(load_rules(default_rules_dir()), seen))
    assert (
        "\nnode_exporter (sending): net.tcp_attempt_fails, net.tcp_estab_resets (no rule reads them yet)\n"
        "    add to node_exporter's command line:\n"
    ) in table, table
    assert f"\n        {NETSTAT.line}\n" in table


def test_the_netstat_flag_is_node_exporters_default_plus_the_two_fields():
    """fixes.yaml's default is the real binary's (--help), and the value is that default with the fields added."""
    binary = require_tool("prometheus-node-exporter", NODE_EXPORTER_INSTALL)
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    text = help_text.stdout + help_text.stderr
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(f"{NETSTAT.flag}=")]
    default = line.strip()[len(NETSTAT.flag) + 1 :].strip().strip('"')
    assert default == NETSTAT.default
    assert NETSTAT.value == default.replace("Tcp_(ActiveOpens|", "Tcp_(ActiveOpens|AttemptFails|EstabResets|")
    assert {m.removeprefix("node_netstat_") for m in NETSTAT.metrics} == {"Tcp_AttemptFails", "Tcp_EstabResets"}


async def test_doctor_on_a_real_node_exporter_names_the_flag_until_it_is_set(tmp_path):
    rules = load_rules(default_rules_dir())
    with (
        running(start_node_exporter(tmp_path / "default")) as stock,
        running(start_node_exporter(tmp_path / "flagged", f"{NETSTAT.flag}={NETSTAT.value}")) as flagged,
    ):
        stock_seen = await collect_targets([f"node={stock.url}/metrics"], 5.0, CATALOG)
        flagged_seen = await collect_targets([f"node={flagged.url}/metrics"], 5.0, CATALOG)
    stock_table = render_table(diagnose(rules, stock_seen))
    assert (
        "\nnode_exporter (sending): net.tcp_attempt_fails, net.tcp_estab_resets (no rule reads them yet)\n"
        "    add to node_exporter's command line:\n"
    ) in stock_table, stock_table
    assert f"\n        {NETSTAT.line}\n" in stock_table
    flagged_report = diagnose(rules, flagged_seen)
    assert {"net.tcp_attempt_fails", "net.tcp_estab_resets"} <= flagged_report.present
    assert "node_exporter (sending)" not in render_table(flagged_report)
    assert NETSTAT.flag not in render_table(flagged_report)
