"""The notifier benchmarks still run, in a tiny form (numbers live in BENCHMARKS.md, never in tests)."""

from __future__ import annotations

import pytest

from bench import notifier_lag, notifier_noise
from bench.__main__ import parse_args
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.streams.processor import MemoryStateStore
from tailhound.streams.ruleset.rulefile import load_rules


def test_notifier_sections_can_run_alone():
    assert parse_args(["--only", "notify-lag,notify-noise"]).sections == ["notify-lag", "notify-noise"]
    assert {"notify-lag", "notify-noise"} <= set(parse_args([]).sections)


@pytest.mark.broker
async def test_lag_bench_delivers_every_event_once_and_reports():
    result = await notifier_lag.run(n=4, reps=1, spacing_s=0.05, resolve_after_s=0.3, variants=("webhook", "slack"))
    for variant in ("webhook", "slack"):
        (r,) = result["runs"][variant]
        assert r["missing"] == 0 and r["duplicates"] == 0 and r["ingested"] == 8
        for kind in ("opened", "resolved"):
            lag = r["lag"][kind]
            assert lag["n"] == 4 and 0 < lag["p50"] <= lag["p90"] <= lag["p99"] <= lag["max"] < 30
        assert r["timestamp_types"] == [0]  # CreateTime: the producer's clock at send
        assert {p["n"] for p in r["parts"].values()} == {8}
    text = notifier_lag.report(result)
    assert "| signed webhook (remediation endpoint) | opened |" in text and "Target: webhook p99" in text
    assert notifier_lag.target_met(result) in (True, False)


def test_lag_percentiles_interpolate():
    assert notifier_lag.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert notifier_lag.percentile([0.0, 10.0], 90) == pytest.approx(9.0)
    assert notifier_lag.summary([0.1, 0.2])["max"] == 0.2


def test_noise_bench_one_scenario_and_the_burst():
    result = notifier_noise.run(["thermal-throttle"])
    (row,) = result["rows"]
    assert row["firings"] >= row["rule_node_firings"] >= 1 and "gpu-thermal-throttle" in row["rules_fired"]
    assert row["incidents"] == 1 and row["events"]["opened"] == 1
    assert row["notifications"]["opened"] == 1  # one page for the incident
    assert sum(row["notifications"].values()) <= sum(row["events"].values())
    grouped, per_incident, _with_resolves = result["bursts"]
    assert sum(grouped["notifications"].values()) == 1 and grouped["groups"] == 1
    assert per_incident["notifications"]["opened"] == notifier_noise.BURST
    text = notifier_noise.report(result)
    assert "| thermal-throttle |" in text and "firings per page" in text


def test_firing_observer_counts_stored_firings_and_restores_the_store():
    rules = load_rules(notifier_noise.RULES)
    sim = FleetSimulator(SimConfig(nodes=1, seed=3), [FaultSpec.parse("nvlink-degraded@22m+5m")])
    original = MemoryStateStore.__setitem__
    events, starts = notifier_noise.replay_with_firings(iter_records(sim, 30), rules)
    assert MemoryStateStore.__setitem__ is original
    assert [e.event for e in events][:1] == ["opened"] and events[0].root_cause == "nvlink-degraded"
    nvlink = [s for s in starts if s[1] == "nvlink-degraded"]
    assert nvlink and all(node == "gpu-node-1" and ts > 0 for node, _, _, ts in nvlink)
    assert len({entity for _, _, entity, _ in nvlink}) == len(nvlink)  # one start per GPU
