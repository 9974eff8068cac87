"""Transition counters (`crossed:`): parsing, counting through evaluate, bounded state, evidence."""

from __future__ import annotations

import pytest

from tailhound.errors import RuleFileError
from tailhound.snapshot import GaugeSample, Snapshot
from tailhound.streams.evaluator import evaluate
from tailhound.streams.node_state import NodeState, heal_future
from tailhound.streams.ruleset.conditions import MAX_CROSSING_TIMES
from tailhound.streams.ruleset.crossings import MAX_CROSSING_KEYS, leaf_key
from tailhound.streams.ruleset.docs import describe
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text

T0 = 1_767_225_600.0
FLAP = "{signal: engine.requests_running, at_most: 0, crossed: {times: 3, within: 10m}}"


def rules_of(when: str) -> RuleSet:
    text = f"""\
groups:
  - name: g
    rules:
      - name: r
        scope: engine
        when: {when}
        root_cause: health-check-flapping
"""
    return RuleSet(rules=parse_rule_text(text, "x.yaml"))


def running(ts: float, value: float | None, engines: tuple[str, ...] = ("0",)) -> Snapshot:
    if value is None:  # the engine is down: a failed scrape
        return Snapshot(ts=ts, node="n", source="vllm", interval_s=15, error="connection refused")
    return Snapshot(
        ts=ts,
        node="n",
        source="vllm",
        interval_s=15,
        samples=[GaugeSample(name="vllm:num_requests_running", labels={"engine": e}, value=value) for e in engines],
    )


def drive(
    rules: RuleSet, values: list[float | None], state: NodeState | None = None
) -> tuple[NodeState, list[tuple[int, object]]]:
    events = []
    for i, v in enumerate(values):
        state, ev = evaluate(state, running(T0 + 15 * i, v), rules)
        events += [(i, e) for e in ev]
    assert state is not None
    return state, events


@pytest.mark.parametrize(
    "bad, msg",
    [
        ("{signal: engine.requests_running, crossed: {times: 3, within: 10m}}", "exactly one of"),
        (
            "{signal: engine.requests_running, at_most: 0, growing_for: 1m, crossed: {times: 3, within: 10m}}",
            "no growing_for",
        ),
        ("{signal: engine.requests_running, at_most: 0, crossed: {times: 0, within: 10m}}", "greater than or equal"),
        ("{signal: engine.requests_running, at_most: 0, crossed: {times: 99, within: 10m}}", "less than or equal"),
        ("{signal: engine.requests_running, at_most: 0, crossed: {times: 3, within: 2h}}", "less than or equal"),
        ("{signal: engine.requests_running, at_most: 0, crossed: {times: 3}}", "within"),
        ("{signal: engine.requests_running, at_most: 0, crossed: {times: 3, within: 1m, every: 2}}", "every"),
    ],
)
def test_bad_counters_are_refused_at_load(bad, msg):
    with pytest.raises(RuleFileError, match=msg):
        rules_of(bad)


def test_traffic_that_drops_to_zero_and_comes_back_twice_holds_once_does_not():
    rules = rules_of(FLAP)
    # busy, zero, busy: two changes (one removal and return, a restart's shape)
    _, events = drive(rules, [5, 5, 0, 0, 6, 6, 6, 6])
    assert events == []
    # ... and a second drop: three changes within 10 minutes
    _, events = drive(rules, [5, 5, 0, 0, 6, 6, 0, 0, 7])
    assert [(i, e.event) for i, e in events] == [(6, "opened")]
    [ev] = [x for x in events[0][1].evidence if x.signal == "engine.requests_running"]
    assert ev.value == 3 and ev.threshold == 3 and ev.window_s == 600
    assert "turned true or false 3 times" in ev.detail


def test_a_missing_signal_is_no_change_and_the_first_value_no_crossing():
    rules = rules_of(FLAP)
    # starts at zero (first value: no change), the engine is down twice (no news): only one real change
    state, events = drive(rules, [0, 0, 5, None, None, 5, None, 5, 5])
    assert events == []
    [entry] = state.crossings.values()
    assert entry[0] == 0.0 and len(entry) - 2 == 1


def test_changes_leave_the_window_and_the_incident_resolves():
    rules = rules_of(FLAP)
    flapping = [5, 0, 5, 0, 5, 0, 5]
    quiet = [5] * 45  # 11+ minutes without a change
    state, events = drive(rules, flapping + quiet)
    kinds = [e.event for _, e in events]
    assert kinds[0] == "opened" and kinds[-1] == "resolved" and kinds.count("opened") == 1
    [entry] = state.crossings.values()
    assert len(entry) == 2  # the old change times were dropped with the window


def test_state_is_bounded_per_entity_and_per_node():
    rules = rules_of(FLAP)
    state, _ = drive(rules, [float(i % 2) for i in range(200)])
    [entry] = state.crossings.values()
    assert len(entry) - 2 == MAX_CROSSING_TIMES
    many = tuple(str(e) for e in range(MAX_CROSSING_KEYS + 40))
    state, _ = evaluate(None, running(T0, 1.0, many), rules)
    assert len(state.crossings) == MAX_CROSSING_KEYS


def test_counters_of_a_removed_rule_are_forgotten_and_future_ones_healed():
    rules = rules_of(FLAP)
    state, _ = drive(rules, [5, 0, 5])
    assert state.crossings
    other = rules_of("{signal: engine.requests_running, at_most: 1, crossed: {times: 3, within: 10m}}")
    state, _ = evaluate(state, running(T0 + 100, 5.0), other)
    assert list(state.crossings) == [f"{leaf_key(other.rules[0].thresholds()[0], 'engine')}|0"]
    state.crossings["engine:x <= 0|0"] = [1.0, T0 + 10**9, T0 + 10**9]
    assert heal_future(state, horizon=T0 + 1000)
    assert "engine:x <= 0|0" not in state.crossings


def test_described_in_rule_docs():
    assert describe(rules_of(FLAP).rules[0].when) == "(engine.requests_running <= 0) changed >= 3 times in 600 s"


def test_a_malformed_stored_counter_starts_again():
    rules = rules_of(FLAP)
    state, _ = drive(rules, [5, 0])
    [slot] = state.crossings
    state.crossings[slot] = []
    state, _ = evaluate(state, running(T0 + 60, 5.0), rules)
    assert state.crossings[slot] == [0.0, T0 + 60]
    state.crossings[slot] = []
    assert heal_future(state, horizon=T0 + 1000) and slot not in state.crossings
