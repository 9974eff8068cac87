"""The agent's, the worker's and the notifier's own metrics pass `promtool check metrics` (Debian's
`prometheus`), and count what they say they count (the worker's on a real worker:
tests/integration/test_worker_endpoint.py)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from tailhound.agents.metrics import AgentMetrics
from tailhound.notifier.deliver import DeliveryStats
from tailhound.notifier.metrics import NotifierCollector
from tailhound.streams.pipeline_metrics import PipelineMetrics
from tests.conftest import require_tool
from tests.notifier.factories import T0, incident_event


def promtool_ok(text: str) -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr + text


def test_the_agent_metrics_pass_promtool():
    m = AgentMetrics()
    m.collections.labels(job="vllm").inc()
    m.collect_seconds.labels(job="vllm").observe(0.01)
    m.sent.inc()
    m.outbox_fill.set(0.25)
    counts: dict[str, int] = {}
    m.track_rejections(counts)
    counts["bad_labels"] = 3  # the builder counts into the dict it shares
    text = m.render().decode()
    assert 'tailhound_agent_exposition_rejected_total{reason="bad_labels"} 3.0' in text
    promtool_ok(text)


def test_the_pipeline_metrics_count_snapshots_stages_incidents_and_lag():
    reg = CollectorRegistry()
    m = PipelineMetrics(reg, clock=lambda: T0 + 30)
    m.snapshot("dcgm", 0.002)
    m.stage_seconds.update(rules=0.5, signals=0.25)
    opened = incident_event(incident_id="inc-1", event="opened", ts=T0)
    m.published(opened)
    m.published(incident_event(incident_id="inc-1", event="updated", sequence=2, ts=T0 + 60))
    v = reg.get_sample_value
    assert v("tailhound_snapshots_total", {"source": "dcgm"}) == 1.0
    assert v("tailhound_stage_seconds_total", {"stage": "rules"}) == 0.5
    assert v("tailhound_incidents_open", {"root_cause": str(opened.root_cause)}) == 1.0
    assert v("tailhound_detection_lag_seconds_sum") == 30.0
    m.published(incident_event(incident_id="inc-1", event="resolved", sequence=3, ts=T0 + 120))
    assert v("tailhound_incidents_open", {"root_cause": str(opened.root_cause)}) is None
    assert v("tailhound_incident_events_total", {"root_cause": str(opened.root_cause), "event": "resolved"}) == 1.0
    promtool_ok(generate_latest(reg).decode())


def test_the_notifier_metrics_count_deliveries_by_outcome():
    stats = DeliveryStats()
    stats.bump(stats.sent, "slack")
    stats.bump(stats.failed, "pagerduty")
    stats.bump(stats.dead, "pagerduty")
    stats.lags.append(0.5)
    service = SimpleNamespace(
        _deliverer=SimpleNamespace(stats=stats),
        receivers={"slack": 1, "pagerduty": 2},
        active=True,
        notifier=SimpleNamespace(groups={"g": 1}),
        ingested=7,
    )
    reg = CollectorRegistry()
    reg.register(NotifierCollector(service))
    v = reg.get_sample_value
    assert v("tailhound_notifications_total", {"receiver": "slack", "outcome": "sent"}) == 1.0
    assert v("tailhound_notifications_total", {"receiver": "pagerduty", "outcome": "dead_lettered"}) == 1.0
    assert v("tailhound_notifier_active") == 1.0 and v("tailhound_notifier_incidents_ingested_total") == 7.0
    promtool_ok(generate_latest(reg).decode())


def test_readiness_means_started_recovered_and_not_rebalancing():
    import asyncio

    from tailhound.worker.metrics import readiness

    completed = asyncio.Event()
    recovery = SimpleNamespace(completed=completed, in_recovery=True)
    app = SimpleNamespace(
        started=False, should_stop=False, rebalancing=False, tables=SimpleNamespace(recovery=recovery)
    )
    assert readiness(app) == (False, "starting")
    app.started = True
    assert readiness(app) == (False, "recovering tables from their changelogs")
    completed.set()
    recovery.in_recovery = False
    app.rebalancing = True
    assert readiness(app) == (False, "rebalancing partitions")
    app.rebalancing = False
    assert readiness(app) == (True, "ready")
    app.should_stop = True
    assert readiness(app) == (False, "stopping")
