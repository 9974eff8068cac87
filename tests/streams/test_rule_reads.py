"""Window statistics are derived only where something can read them, and that changes no result."""

from __future__ import annotations

import itertools
import json

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.streams.extract import HISTOGRAM_STATS
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rule_reads import readable_signals, window_stats_read
from tailhound.streams.ruleset.rulefile import RuleSet, load_rules, parse_rule_text

RULES = "rules"

ITL_RULE = """
groups:
  - name: extra
    rules:
      - name: itl-slow
        scope: engine
        when: {signal: latency.itl.p50, above: 0.0}
        severity: warning
        symptom: true
"""


@pytest.fixture(scope="module")
def fleet_snapshots():
    sim = FleetSimulator(SimConfig(nodes=2), [FaultSpec.parse("thermal-throttle@2m+5m")])
    builder = SnapshotBuilder()
    return [builder.build(r) for r in itertools.islice(iter_records(sim, minutes=10**6), 8 * 40)]


def _run(processor: SnapshotProcessor, snapshots, store: MemoryStateStore | None = None) -> tuple[list[str], list[str]]:
    """(every stored state as JSON, every event as JSON)."""
    store = MemoryStateStore() if store is None else store
    states, events = [], []
    for snap in snapshots:
        step = processor.step(store.get(snap.node), snap)
        events += [ev.model_dump_json() for ev in step.events]
        if step.changed:
            store[snap.node] = step.state
            states.append(json.dumps(dict(step.state)))
    return states, events


def _is_stat(signal: str) -> bool:
    return signal.rpartition(".")[2] in HISTOGRAM_STATS


def test_readable_signals_cover_conditions_context_counts_and_inputs():
    rules = load_rules(RULES)
    readable = readable_signals(rules)
    assert rules.reads <= readable
    assert {c for r in rules.rules for c in r.context} <= readable
    assert {"tokens.prompt.mean", "tokens.generation.mean"} <= readable  # the load next to latency evidence
    for signal in [s for s in readable if _is_stat(s)]:
        assert f"{signal.rpartition('.')[0]}.window_count" in readable
    if "engine.arrival_rate" in rules.reads:
        assert "latency.e2e.window_count" in readable  # demand is computed from it
    assert "latency.itl.p50" not in readable  # no default rule reads it
    assert "latency.ttft.p95" in readable_signals(RuleSet(rules=[]), ["latency.ttft.p95"])  # a load model's
    assert window_stats_read(rules) is window_stats_read(rules)  # kept with the rule set


def test_only_read_statistics_are_derived_and_nothing_else_changes(fleet_snapshots):
    rules = load_rules(RULES)
    full, lean = SnapshotProcessor(rules, all_stats=True), SnapshotProcessor(rules)
    assert _run(full, fleet_snapshots) == _run(lean, fleet_snapshots)  # same states (byte for byte), same events
    readable = readable_signals(rules)
    for node in {s.node for s in fleet_snapshots}:
        now = max(s.ts for s in fleet_snapshots if s.node == node)
        everything, derived = full.view(node, now), lean.view(node, now)
        assert any(_is_stat(s) and s not in readable for s in everything)  # there was something to leave out
        assert derived == {s: v for s, v in everything.items() if s in readable or not _is_stat(s)}


def test_a_reload_derives_what_the_new_rules_read_at_once(fleet_snapshots):
    rules = load_rules(RULES)
    more = RuleSet(rules=[*rules.rules, *parse_rule_text(ITL_RULE, "extra.yaml")])
    full, lean = SnapshotProcessor(rules, all_stats=True), SnapshotProcessor(rules)
    half, stores = len(fleet_snapshots) // 2, (MemoryStateStore(), MemoryStateStore())
    _run(full, fleet_snapshots[:half], stores[0])
    _run(lean, fleet_snapshots[:half], stores[1])
    node = fleet_snapshots[0].node
    now = max(s.ts for s in fleet_snapshots[:half] if s.node == node)
    assert "latency.itl.p50" not in lean.view(node, now)
    full.replace_rules(more)
    lean.replace_rules(more)
    assert lean.view(node, now)["latency.itl.p50"] == full.view(node, now)["latency.itl.p50"]
    assert _run(full, fleet_snapshots[half:], stores[0]) == _run(lean, fleet_snapshots[half:], stores[1])
