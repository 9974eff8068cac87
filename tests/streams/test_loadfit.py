"""Load-aware baselines end to end: recording -> training rows -> model -> used by a baseline rule."""

from __future__ import annotations

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.streams.loadfit import training_rows
from tailhound.streams.loadmodel import LoadModel
from tailhound.streams.processor import read_load_models
from tailhound.streams.replay import replay_records
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text

RULE = """\
groups:
  - name: g
    rules:
      - name: ttft-over-load-baseline
        scope: engine
        when: {signal: latency.ttft.p95, above_baseline: 3.0, min_observations: 20}
        for: 2m
        root_cause: capacity
"""


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    sim = FleetSimulator(SimConfig(nodes=2, seed=21))
    rows, targets = training_rows(iter_records(sim, 75))
    assert len(rows) >= 100 and all(t > 0 for t in targets)
    assert all(r.running > 0 and r.prompt_tokens > 0 and r.request_rate > 0 for r in rows)
    path = tmp_path_factory.mktemp("m") / "ttft.json"
    model = LoadModel.fit(rows, targets, signal="latency.ttft.p95")
    assert model.artifact.fit.pinball_loss < model.artifact.fit.baseline_pinball_loss
    model.save(path)
    return path


def test_rule_uses_the_load_model_and_says_so(model_path):
    models = read_load_models([model_path])
    assert set(models) == {"latency.ttft.p95"}
    rules = RuleSet(rules=parse_rule_text(RULE, "x.yaml"))
    sim = FleetSimulator(SimConfig(nodes=1, seed=4), [FaultSpec.parse("kv-cache-pressure@30m+10m")])
    result = replay_records(iter_records(sim, 45), rules, load_models=models)
    opened = [e for e in result.events if e.event == "opened"]
    assert opened, "the TTFT jump under KV pressure is far above what the load model expects"
    details = [ev.detail for e in result.events for ev in e.evidence if ev.baseline is not None]
    assert any("load-model" in d or "rolling" in d for d in details)
