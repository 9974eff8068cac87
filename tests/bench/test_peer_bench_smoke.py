"""The peer benchmark still runs, on a tiny fleet (its numbers live in BENCHMARKS.md, never in tests)."""

from __future__ import annotations

import subprocess

from bench import peer
from tests.conftest import require_tool
from tests.ingest.prometheus_proc import INSTALL


def test_the_rule_file_is_valid_promql_scaled_or_not(tmp_path):
    promtool = require_tool("promtool", INSTALL)
    scaled = tmp_path / "rules.yml"
    scaled.write_text(peer.scaled_rules(peer.RULES.read_text(), 1.0))
    for path in (peer.RULES, scaled):
        done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "[4000ms]" in scaled.read_text() and "[1m]" not in scaled.read_text()  # 1 m at 15 s: 4 s at 1 s


def test_scaling_keeps_the_samples_per_window():
    text = "rate(x[5m:15s]) for: 2m avg_over_time(y[30m])"
    assert peer.scaled_rules(text, 3.0) == "rate(x[60000ms:3000ms]) for: 24000ms avg_over_time(y[360000ms])"


async def test_prometheus_scrapes_the_fleet_and_evaluates_every_rule(tmp_path):
    require_tool("prometheus", INSTALL)
    rounds = peer.fleet(nodes=1, rounds=5)
    assert [len(b) for b in rounds] == [4] * 5 and {r.job for r in rounds[0]} == set(peer.JOBS)
    assert rounds[0][0].body != rounds[1][0].body  # the pages change every scrape
    result = {
        "nodes": 1,
        "rounds": 5,
        "interval_s": 0.5,
        "reps": 1,
        "rules": 23,
        "runs": {
            "prometheus": [await peer.run_prometheus(rounds, 0.5, 1, tmp_path)],
            "agent": [peer.run_agent(rounds)],
            "worker": [],
            "broker": [],
        },
    }
    prom = result["runs"]["prometheus"][0]
    assert prom["node_rounds"] >= 1 and prom["cpu_s"] >= 0
    assert prom["rule_evaluations"] > 0 and prom["rule_failures"] == 0 and 0 < prom["up"] <= 1
    assert result["runs"]["agent"][0]["node_rounds"] == 4
    text = peer.report(result)
    assert "Prometheus (scrape + TSDB + 23 PromQL rules)" in text and "nodes per core at 15 s" in text


def test_the_report_has_the_two_summary_lines():
    def row(npc: float) -> dict:
        return {
            "cpu_s": 1.0,
            "node_rounds": 10.0,
            "nodes_per_core": npc,
            "rule_evaluations": 5.0,
            "rule_failures": 0.0,
            "up": 1.0,
        }

    result = {
        "nodes": 2,
        "rounds": 4,
        "interval_s": 1.0,
        "reps": 1,
        "rules": 23,
        "runs": {"prometheus": [row(1000.0)], "agent": [row(4000.0)], "worker": [row(1130.0)], "broker": [row(2260.0)]},
    }
    text = peer.report(result)
    assert "worker / Prometheus: 1.13x" in text and "worker + broker / Prometheus: 0.75x" in text
    assert "targets up at the end: 100%" in text


def test_bundled_messages_hold_a_nodes_round_and_decode_into_its_snapshots(monkeypatch):
    from tailhound.streams.codec import decode_message
    from tailhound.wire.v3_decode import LayoutCache

    rounds = peer.fleet(nodes=2, rounds=2)
    monkeypatch.setitem(peer.WIRE, "version", 3)
    assert len(peer.snapshot_messages(rounds)) == 4  # as the agent's default with wire 3: bundled
    monkeypatch.setitem(peer.BUNDLE, "on", False)
    plain = peer.snapshot_messages(rounds)
    monkeypatch.setitem(peer.BUNDLE, "on", True)
    bundled = peer.snapshot_messages(rounds)
    assert len(plain) == 16 and len(bundled) == 4  # 2 nodes x 2 rounds, 4 sources each
    cache, plain_cache = LayoutCache(), LayoutCache()
    parts = [s for _, v in bundled for s in decode_message(v, layouts=cache)]
    assert [(s.node, s.source) for s in parts] == [
        (k.decode(), s.source) for k, v in plain for s in decode_message(v, layouts=plain_cache)
    ]
