"""What the worker let in and what it did not, since it started: accepted, rejected by reason, redelivered,
held, dead letters and forwards that failed, nodes expired and evicted. The worker logs them
(:meth:`IntakeStats.describe`) and exports them as Prometheus counters (:class:`StatsCollector`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from .fleet_cap import MODEL, MODEL_NODE, NODE, EvictionLog

#: what :class:`tailhound.streams.layout_store.StoredLayouts` counts
LAYOUT_EVENTS = ("written", "recalled", "unreadable")


class IntakeStats:
    """What the worker let in and what it did not, since it started (per process)."""

    def __init__(self) -> None:
        #: valid snapshots evaluated
        self.accepted = 0
        #: reason -> messages rejected (dead-lettered): codec.rejection_kind's, FUTURE_TS, TOO_OLD, ...
        self.rejected: Counter[str] = Counter()
        #: valid snapshots not newer than what their source on the node already sent (a redelivery after a
        #: restart or rebalance, at least once): dropped
        self.redelivered = 0
        #: snapshots held apart (far ahead of their source; evaluated when the next ones confirm them)
        self.held = 0
        #: dead letters that could not be produced (logged; the message is skipped)
        self.deadletter_failed = 0
        #: engine snapshots that could not be forwarded to the model stage (logged)
        self.forward_failed = 0
        #: nodes expired after node_expiry_s without telemetry, and their incidents resolved for it
        self.nodes_expired = 0
        self.incidents_gone = 0
        #: nodes and models evicted over the fleet-state caps, by kind (tailhound.streams.fleet_cap; logged there)
        self.evictions = EvictionLog()
        #: version-3 layouts written to the layouts table, recalled from it, stored ones that did not read
        #: (tailhound.streams.layout_store)
        self.layouts: Counter[str] = Counter()

    def reject(self, kind: str) -> None:
        self.rejected[kind] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rejected": dict(sorted(self.rejected.items())),
            "redelivered": self.redelivered,
            "held": self.held,
            "deadletter_failed": self.deadletter_failed,
            "forward_failed": self.forward_failed,
            "nodes_expired": self.nodes_expired,
            "incidents_gone": self.incidents_gone,
            "evicted": dict(sorted(self.evictions.total.items())),
            "layouts": dict(sorted(self.layouts.items())),
        }

    def describe(self) -> str:
        rejected = ", ".join(f"{k}={v}" for k, v in sorted(self.rejected.items())) or "none"
        return (
            f"intake: {self.accepted} accepted, {self.redelivered} redelivered (dropped), rejected: "
            f"{rejected}; {self.deadletter_failed} dead letters failed, {self.forward_failed} forwards "
            f"failed; {self.nodes_expired} nodes expired ({self.incidents_gone} incidents resolved)"
        )


class StatsCollector(Collector):
    """:class:`IntakeStats` as Prometheus counters, for the worker's metrics registry."""

    def __init__(self, stats: IntakeStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        s = self.stats
        yield CounterMetricFamily(
            "tailhound_telemetry_accepted", "Valid telemetry snapshots evaluated.", value=s.accepted
        )
        rejected = CounterMetricFamily(
            "tailhound_telemetry_rejected", "Telemetry messages rejected (dead letters), by reason.", labels=["reason"]
        )
        for reason, n in sorted(s.rejected.items()):
            rejected.add_metric([reason], n)
        yield rejected
        yield CounterMetricFamily(
            "tailhound_telemetry_redelivered",
            "Snapshots not newer than their source's last one on the node (redeliveries), dropped.",
            value=s.redelivered,
        )
        yield CounterMetricFamily(
            "tailhound_telemetry_held",
            "Snapshots held apart, far ahead of their source, until its next ones confirmed them.",
            value=s.held,
        )
        yield CounterMetricFamily(
            "tailhound_deadletter_failed", "Dead letters that could not be produced.", value=s.deadletter_failed
        )
        yield CounterMetricFamily(
            "tailhound_nodes_expired",
            "Nodes expired after streams.node_expiry_s without telemetry.",
            value=s.nodes_expired,
        )
        evicted = CounterMetricFamily(
            "tailhound_state_evicted",
            "Names evicted over the fleet-state caps "
            "(streams.max_nodes, streams.max_models), the least recently seen first, "
            "by kind.",
            labels=["kind"],
        )
        for kind in (NODE, MODEL, MODEL_NODE):
            evicted.add_metric([kind], s.evictions.total[kind])
        yield evicted
        layouts = CounterMetricFamily(
            "tailhound_telemetry_layouts",
            "Version-3 layouts written to the layouts table, recalled from it (after a restart or a takeover), and "
            "stored ones that did not read, by event.",
            labels=["event"],
        )
        for event in LAYOUT_EVENTS:
            layouts.add_metric([event], s.layouts[event])
        yield layouts
