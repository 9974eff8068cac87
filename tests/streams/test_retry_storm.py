"""The retry-storm rule on vLLM's HTTP counters and e2e histogram, through the agent pipeline."""

from __future__ import annotations

from pathlib import Path

from tailhound.agents.render import ExpositionWriter
from tailhound.recording import ScrapeRecord
from tailhound.streams.replay import replay_records
from tailhound.streams.ruleset.rulefile import load_rules

T0 = 1_767_225_600.0
LE = [1.0, 5.0, 10.0, 15.0, 20.0, 30.0]


def records(storm_from: int, ticks: int, storm_rejected: float = 25.0, storm_ok: float = 40.0):
    ok = rej = 0.0
    counts = [0.0] * len(LE)
    total = 0.0
    for i in range(ticks):
        storm = i >= storm_from
        ok += (storm_ok if storm else 40) * 15
        rej += (storm_rejected if storm else 0.05) * 15
        new = 200.0
        for j, bound in enumerate(LE):  # storm: a third of requests above 15 s
            share = (0.6 if bound < 15 else 0.66) if storm else (0.97 if bound < 5 else 1.0)
            counts[j] += new * share
        total += new
        w = ExpositionWriter()
        labels = {"engine": "0", "model_name": "m"}
        w.counter("http_requests_total", ok, {"handler": "/v1/chat/completions", "method": "POST", "status": "2xx"})
        w.counter("http_requests_total", rej, {"handler": "/v1/chat/completions", "method": "POST", "status": "4xx"})
        w.histogram("vllm:e2e_request_latency_seconds", LE, counts, total, total * 3.0, labels)
        w.gauge("vllm:num_requests_waiting", 300.0 if storm else 1.0, labels)
        yield ScrapeRecord(
            ts=T0 + 15 * i,
            node="gpu-node-1",
            job="vllm",
            body=w.text(),
            interval_s=15,
            labels={"instance": "10.0.0.5:8000"},
        )


def test_retry_storm_opens_with_its_evidence():
    rules = load_rules(Path(__file__).resolve().parents[2] / "rules")
    events = replay_records(records(storm_from=20, ticks=45), rules).events
    opened = [e for e in events if e.event == "opened"]
    assert opened, [(e.event, e.root_cause) for e in events]
    last = events[-1]
    assert last.root_cause == "retry-storm"
    signals = {ev.signal for ev in last.evidence}
    assert "sum(engine.http_rejections.rate)" in signals and "latency.e2e.p99" in signals


def test_a_few_rejections_are_not_a_storm():
    rules = load_rules(Path(__file__).resolve().parents[2] / "rules")
    events = replay_records(records(storm_from=10_000, ticks=40), rules).events
    assert not [e for e in events if e.root_cause == "retry-storm"]


def test_mild_rejections_need_amplification_over_the_baseline():
    rules = load_rules(Path(__file__).resolve().parents[2] / "rules")
    # 15% rejected: retries alone would amplify by 1.18x; the storm is that arrivals are 1.5x the baseline
    amplified = replay_records(records(storm_from=100, ticks=125, storm_rejected=10.5, storm_ok=60), rules).events
    assert [e.root_cause for e in amplified if e.event == "opened"] == ["retry-storm"]
    ev = next(e for e in amplified if e.event == "opened")
    assert any(x.signal == "sum(engine.http_requests.rate)" and x.baseline for x in ev.evidence)
    # the same rejections with arrivals at their usual rate: no storm (overload, not amplification)
    flat = replay_records(records(storm_from=100, ticks=125, storm_rejected=7.0, storm_ok=33), rules).events
    assert not [e for e in flat if e.root_cause == "retry-storm"]
