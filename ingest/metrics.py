"""The ingest service's own metrics (``GET /metrics`` on its listen address).

- ``tailhound_ingest_requests_total{status}`` and ``tailhound_ingest_request_duration_seconds``: remote-write
  requests by the status answered (204, 400, 401, 413, 415, 503 ...);
- ``tailhound_ingest_events_total{event}``: what the receiver, the grouping, the HA tracker and the federation
  pull counted (``series``, ``samples``, ``snapshots``, ``late_samples``, ``unknown_series``,
  ``rejected_no_node``, ``ha_dropped_series``, ``federation_pulls`` ...), read at scrape time;
- ``tailhound_ingest_pending_samples``, ``tailhound_ingest_open_scrapes``, ``tailhound_ingest_sources``: the
  grouping's memory;
- ``tailhound_ingest_dead_letters_total`` / ``..._dead_letters_dropped_total``: rejects published to the
  dead-letter topic, and those lost because the broker was away longer than the dead-letter queue holds;
- the publisher's, as the agent's: ``tailhound_ingest_snapshots_sent_total``, ``..._outbox_messages``,
  ``..._broker_up``, ``..._send_latency_seconds`` ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailhound.agents.metrics import PublishMetrics
from tailhound.http_guard import export_dropped

PREFIX = "tailhound_ingest"


class IngestMetrics(PublishMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_requests", "Remote-write requests, by the status answered.", ["status"], registry=r
        )
        self.request_seconds = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Time to answer one request.",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.dead_letters = Counter(f"{PREFIX}_dead_letters", "Rejects published to the dead-letter topic.", registry=r)
        self.dead_letters_dropped = Counter(
            f"{PREFIX}_dead_letters_dropped",
            "Rejects not published: the dead-letter queue was full (broker away).",
            registry=r,
        )
        export_dropped(r, PREFIX)  # tailhound_ingest_http_connections_dropped_total{reason}: the server's site adds

    def watch(self, stats: Callable[[], dict[str, int]], gauges: Callable[[], dict[str, float]]) -> None:
        """Export `stats()` as tailhound_ingest_events_total{event} and `gauges()` (name -> value) at scrape."""
        self.registry.register(_StatsCollector(stats, gauges))


class _StatsCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, int]], gauges: Callable[[], dict[str, float]]) -> None:
        self.stats, self.gauges = stats, gauges

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            f"{PREFIX}_events",
            "What the receiver, the grouping, the HA tracker and the federation pull counted, by event.",
            labels=["event"],
        )
        for event, n in sorted(self.stats().items()):
            family.add_metric([event], n)
        yield family
        for name, value in sorted(self.gauges().items()):
            yield GaugeMetricFamily(
                f"{PREFIX}_{name}", _GAUGE_HELP.get(name, name.replace("_", " ") + "."), value=value
            )


_GAUGE_HELP = {
    "pending_samples": "Samples held in scrapes not yet complete.",
    "open_scrapes": "Scrapes not yet complete (waiting settle_s for more of their samples).",
    "sources": "Sources (node, job, target labels) whose state is kept.",
    "dead_letter_queue": "Rejects waiting for the broker.",
}
