"""What only the running Faust worker knows: consumer lag and readiness.

- ``tailhound_consumer_lag_messages{topic,partition}``: messages of the telemetry topic not read yet, per
  partition this worker owns (the partition's high watermark minus the next offset to read), read at
  scrape time from the Kafka consumer (a worker that owns no partition reports none);
- ``tailhound_worker_ready``: 1 once the tables are recovered from their changelogs and the worker
  processes telemetry (``GET /-/ready`` answers 200), else 0.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import faust
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


def readiness(app: faust.App) -> tuple[bool, str]:
    """(ready, why): ready once the worker runs, table recovery has completed and no rebalance is under way."""
    if not getattr(app, "started", False) or app.should_stop:
        return False, "starting" if not app.should_stop else "stopping"
    recovery = app.tables.recovery
    if not recovery.completed.is_set() or getattr(recovery, "in_recovery", False):
        return False, "recovering tables from their changelogs"
    if getattr(app, "rebalancing", False):
        return False, "rebalancing partitions"
    return True, "ready"


class ConsumerLagCollector(Collector):
    def __init__(self, app: faust.App, topic: str) -> None:
        self.app = app
        self.topic = topic

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "tailhound_consumer_lag_messages",
            "Telemetry messages not read yet, per partition this worker owns.",
            labels=["topic", "partition"],
        )
        for tp, behind in sorted(self._lags().items()):
            lag.add_metric([tp[0], str(tp[1])], behind)
        yield lag
        ready, _ = readiness(self.app)
        yield GaugeMetricFamily(
            "tailhound_worker_ready",
            "1 once tables are recovered and telemetry is processed.",
            value=1.0 if ready else 0.0,
        )

    def _lags(self) -> dict[tuple[str, int], float]:
        out: dict[tuple[str, int], float] = {}
        try:
            consumer: Any = self.app.consumer
            assigned = [tp for tp in consumer.assignment() if tp.topic == self.topic]
            read = getattr(consumer, "_read_offset", {})
            for tp in assigned:
                high = consumer.highwater(tp)
                if high is None:
                    continue
                last = read.get(tp)
                next_offset = (last + 1) if last is not None else 0
                out[(tp.topic, tp.partition)] = float(max(high - next_offset, 0))
        except Exception as exc:  # a scrape must never fail because the consumer is restarting
            log.debug("consumer lag unavailable: %r", exc)
        return out
