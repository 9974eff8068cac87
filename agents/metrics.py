"""The agent's own endpoint (``listen`` in agent.yaml, 127.0.0.1:9464 by default):

- ``GET /metrics``: the agent's Prometheus metrics, with the process's (``process_*``, ``python_*``);
- ``GET /-/healthy``: 200 while the process serves (liveness);
- ``GET /-/ready``: 200 once every collector ran once (a failed collection counts: it was published as a
  gap) and the memory outbox is not full (the broker keeps up), else 503 with the reason (readiness).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from tailhound.endpoints import add_process_metrics, healthy_response, ready_response
from tailhound.logs import log_always

log = logging.getLogger("tailhound.agent")


class PublishMetrics:
    """What a snapshot publisher (:class:`tailhound.agents.sender.SnapshotSender`) counts, named
    ``<prefix>_snapshots_sent_total`` ...: the agent's (``tailhound_agent``) and the remote-write ingest's
    (``tailhound_ingest``)."""

    def __init__(self, prefix: str = "tailhound_agent", registry: CollectorRegistry | None = None) -> None:
        r = self.registry = add_process_metrics(registry or CollectorRegistry())
        self.prefix = prefix
        self.enqueued = Counter(f"{prefix}_snapshots_enqueued", "Snapshots put in the outbox.", registry=r)
        self.sent = Counter(f"{prefix}_snapshots_sent", "Snapshots the broker acknowledged.", registry=r)
        self.dropped = Counter(
            f"{prefix}_snapshots_dropped", "Snapshots dropped because the outbox was full.", registry=r
        )
        self.send_errors = Counter(f"{prefix}_send_errors", "Failed send attempts (retried).", registry=r)
        self.outbox_messages = Gauge(f"{prefix}_outbox_messages", "Snapshots waiting for the broker.", registry=r)
        self.outbox_fill = Gauge(f"{prefix}_outbox_fill_ratio", "Memory outbox fill (0..1).", registry=r)
        self.send_latency = Histogram(
            f"{prefix}_send_latency_seconds",
            "Collection to broker acknowledgement, per snapshot.",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.broker_up = Gauge(f"{prefix}_broker_up", "1 while the last send succeeded.", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class AgentMetrics(PublishMetrics):
    def __init__(self) -> None:
        super().__init__("tailhound_agent")
        r = self.registry
        self.collections = Counter("tailhound_agent_collections", "Collections run, by job.", ["job"], registry=r)
        self.collect_errors = Counter(
            "tailhound_agent_collect_errors", "Failed collections (published as gaps).", ["job"], registry=r
        )
        self.collect_seconds = Histogram(
            "tailhound_agent_collect_duration_seconds",
            "Time one collection took.",
            ["job"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.collectors_off = Gauge(
            "tailhound_agent_collectors_disabled", "Collectors turned off on this host.", registry=r
        )
        #: exposition lines the parser left out, by reason (the SnapshotBuilder's counts, read at scrape time)
        self.rejected: dict[str, int] = {}
        r.register(_RejectedCollector(self))
        #: the collectors' jobs readiness waits for (Agent sets them), and those that ran at least once
        self.expected_jobs: set[str] | None = None
        self.settled_jobs: set[str] = set()

    def expect_jobs(self, jobs: Iterable[str]) -> None:
        """The jobs of the agent's collectors: ready once each of them ran (or turned itself off) once."""
        self.expected_jobs = set(jobs)

    def job_settled(self, job: str) -> None:
        self.settled_jobs.add(job)

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): every expected job ran once and the memory outbox is below its limit."""
        if self.expected_jobs is None:
            return False, "collectors not started"
        waiting = sorted(self.expected_jobs - self.settled_jobs)
        if waiting:
            return False, "waiting for the first collection of " + ", ".join(waiting[:10])
        if (self.registry.get_sample_value(f"{self.prefix}_outbox_fill_ratio") or 0.0) >= 1.0:
            return False, "outbox full (the broker does not keep up; the oldest snapshots are dropped)"
        return True, ""

    def track_rejections(self, counts: dict[str, int]) -> None:
        """Export `counts` (a SnapshotBuilder's ``rejected``) as tailhound_agent_exposition_rejected_total."""
        self.rejected = counts


def make_app(metrics: AgentMetrics) -> web.Application:
    """The endpoint's routes: /metrics, /-/healthy, /-/ready."""

    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthy(_request: web.Request) -> web.Response:
        return healthy_response("agent")

    async def ready(_request: web.Request) -> web.Response:
        return ready_response("agent", *metrics.readiness())

    app = web.Application(client_max_size=1024)  # GETs only
    app.router.add_get("/metrics", handle)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    return app


async def serve_metrics(metrics: AgentMetrics, listen: str) -> web.AppRunner:
    """Serve the endpoint on ``host:port``; returns the runner (``await runner.cleanup()`` stops it)."""
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(make_app(metrics), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host or "0.0.0.0", int(port))
    await site.start()
    address = f"{host or '0.0.0.0'}:{bound_port(runner)}"
    log_always(log, f"agent endpoint on {address}", address=address, paths="/metrics /-/healthy /-/ready")
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port the metrics server listens on (useful with port 0)."""
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return server.sockets[0].getsockname()[1]
    raise RuntimeError("metrics server is not listening")


class _RejectedCollector(Collector):
    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "tailhound_agent_exposition_rejected",
            "Exposition lines or families the parser left out (one bad family drops only itself), by reason.",
            labels=["reason"],
        )
        for reason, n in sorted(dict(self.metrics.rejected).items()):
            family.add_metric([reason], n)
        yield family
