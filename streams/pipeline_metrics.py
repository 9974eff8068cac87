"""The worker's metrics about its own work: snapshots per source, node-stage time per snapshot and per stage,
model-stage time, incident events published and open, the roll-up's ordering and detection lag.

They sit in the worker's registry beside rule coverage (:mod:`tailhound.streams.coverage_watch`), intake counts
and rule reloads; consumer lag is :mod:`tailhound.worker.metrics` (it needs the Kafka consumer). The list with
their meaning is in docs/operations.md.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as _Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailhound.incident import IncidentEvent

log = logging.getLogger(__name__)
PROCESSING_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
LAG_BUCKETS = (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)
#: sources are a closed set in practice (the catalog's and the agent's); beyond this many, "other"
MAX_SOURCES = 64
#: open incidents remembered for tailhound_incidents_open (a restarted worker relearns them from their updates)
MAX_OPEN = 100_000


class PipelineMetrics:
    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.snapshots = Counter(
            "tailhound_snapshots", "Snapshots evaluated, by source.", ["source"], registry=registry
        )
        self.processing = Histogram(
            "tailhound_snapshot_processing_seconds",
            "Node-stage time per snapshot.",
            buckets=PROCESSING_BUCKETS,
            registry=registry,
        )
        self.incident_events = Counter(
            "tailhound_incident_events",
            "Incident events published, by root cause and event.",
            ["root_cause", "event"],
            registry=registry,
        )
        self.detection_lag = Histogram(
            "tailhound_detection_lag_seconds",
            "From the event time of the snapshot that opened an incident to its publication.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        #: filled by the node stage's processor (SnapshotProcessor.timings) and the model agent
        self.stage_seconds: dict[str, float] = {}
        self.model_stage_seconds = 0.0
        #: the roll-up's order (set by the roll-up agent): ordered / forced / late counts, events pending
        self.rollup_order: dict[str, int] = {}
        self.rollup_pending = 0
        self._open: dict[str, str] = {}  # incident id -> root cause
        self._sources: set[str] = set()
        registry.register(_Collected(self))

    def snapshot(self, source: str, seconds: float) -> None:
        if source not in self._sources:
            if len(self._sources) >= MAX_SOURCES:
                source = "other"
            else:
                self._sources.add(source)
        self.snapshots.labels(source=source).inc()
        self.processing.observe(seconds)

    def published(self, ev: IncidentEvent) -> None:
        self.incident_events.labels(root_cause=str(ev.root_cause), event=ev.event).inc()
        if ev.event == "resolved":
            self._open.pop(ev.incident_id, None)
            return
        if ev.event == "opened":
            self.detection_lag.observe(max(self.clock() - ev.ts, 0.0))
        if ev.incident_id in self._open or len(self._open) < MAX_OPEN:
            self._open[ev.incident_id] = str(ev.root_cause)

    def rollup_order_seen(self, state, released: int) -> None:
        """The roll-up's order state after a message (:class:`tailhound.streams.rollup.order.OrderState`), and
        how many member events it released then."""
        late, forced = self.rollup_order.get("late", 0), self.rollup_order.get("forced", 0)
        if state.late > late or state.forced > forced:
            log.info(
                "roll-up order: %d events late, %d released by the wall-clock bound (streams."
                "rollup_max_delay_s) since this worker took the roll-up",
                state.late,
                state.forced,
            )
        new_late, new_forced = max(late, state.late), max(forced, state.forced)
        self.rollup_order["late"], self.rollup_order["forced"] = new_late, new_forced
        in_order = max(released - (new_late - late) - (new_forced - forced), 0)
        self.rollup_order["ordered"] = self.rollup_order.get("ordered", 0) + in_order
        self.rollup_pending = len(state.pending)

    def open_by_cause(self) -> dict[str, int]:
        return dict(_Counter(self._open.values()))


class _Collected(Collector):
    """The values kept as plain numbers (stage seconds, open incidents), read at scrape time."""

    def __init__(self, metrics: PipelineMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        stages = CounterMetricFamily(
            "tailhound_stage_seconds", "Seconds spent in each node-stage evaluation stage.", labels=["stage"]
        )
        for name, seconds in sorted(self.metrics.stage_seconds.items()):
            stages.add_metric([name], seconds)
        yield stages
        yield CounterMetricFamily(
            "tailhound_model_stage_seconds", "Seconds spent in the model stage.", value=self.metrics.model_stage_seconds
        )
        open_ = GaugeMetricFamily(
            "tailhound_incidents_open", "Incidents open now, by root cause.", labels=["root_cause"]
        )
        for cause, n in sorted(self.metrics.open_by_cause().items()):
            open_.add_metric([cause], n)
        yield open_
        order = CounterMetricFamily(
            "tailhound_rollup_order_events",
            "Member incident events the roll-up took in "
            "event-time order (ordered), released by the wall-clock bound before "
            "every partition passed them (forced), or after later ones (late).",
            labels=["how"],
        )
        for how, n in sorted(self.metrics.rollup_order.items()):
            order.add_metric([how], n)
        yield order
        yield GaugeMetricFamily(
            "tailhound_rollup_order_pending",
            "Member incident events waiting for their turn in the roll-up's event-time order.",
            value=self.metrics.rollup_pending,
        )
