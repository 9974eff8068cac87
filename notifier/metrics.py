"""The notifier's own metrics, read at scrape time from the running service:

- ``tailhound_notifications_total{receiver,outcome}``: notifications delivered (``sent``), failed attempts
  that will be retried or dead-lettered (``failed``), and given up (``dead_lettered``, on the dead-letter
  topic with the reason);
- ``tailhound_notification_delivery_seconds``: from the notification's creation to its delivery (the
  last deliveries, as a summary: count and sum);
- ``tailhound_notifier_active``: 1 on the active notifier of the group (the one that sends), 0 on standbys;
- ``tailhound_notifier_groups``: notification groups held (open incidents and their recent history);
- ``tailhound_notifier_incidents_ingested_total``: incident events read from the incident topic;
- ``tailhound_notifier_receiver_disabled{receiver}``: 1 for a receiver disabled at start for a missing secret.

Served by the worker's ``/metrics`` when the notifier runs inside it, and by the notifier API's
``/metrics`` (``notifier.api_listen``) when it runs alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = (("sent", "sent"), ("failed", "failed"), ("dead", "dead_lettered"))


class NotifierCollector(Collector):
    def __init__(self, service: Any) -> None:
        self.service = service  # a tailhound.notifier.service.NotifierService

    def collect(self) -> Iterator[Metric]:
        svc = self.service
        stats = svc._deliverer.stats
        sent = CounterMetricFamily(
            "tailhound_notifications", "Notifications by receiver and outcome.", labels=["receiver", "outcome"]
        )
        for receiver in sorted(svc.receivers):
            for field, outcome in OUTCOMES:
                sent.add_metric([receiver, outcome], getattr(stats, field).get(receiver, 0))
        yield sent
        lags = list(stats.lags)
        yield SummaryMetricFamily(
            "tailhound_notification_delivery_seconds",
            "From a notification's creation to its delivery (the last deliveries).",
            count_value=len(lags),
            sum_value=sum(lags),
        )
        yield GaugeMetricFamily(
            "tailhound_notifier_active",
            "1 on the notifier that sends, 0 on standbys.",
            value=1.0 if svc.active else 0.0,
        )
        yield GaugeMetricFamily(
            "tailhound_notifier_groups", "Notification groups held.", value=float(len(svc.notifier.groups))
        )
        yield CounterMetricFamily(
            "tailhound_notifier_incidents_ingested", "Incident events read.", value=float(svc.ingested)
        )


class DisabledReceiversCollector(Collector):
    """``tailhound_notifier_receiver_disabled{receiver}``: 1 for a receiver disabled for a missing secret."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "tailhound_notifier_receiver_disabled",
            "1 for a receiver disabled at start "
            "because a secret it names is missing (its routes go to the fallback), else 0.",
            labels=["receiver"],
        )
        names = {rc.name for rc in self.service.config.receivers} | set(self.service.disabled)
        for name in sorted(names):
            gauge.add_metric([name], 1.0 if name in self.service.disabled else 0.0)
        yield gauge
