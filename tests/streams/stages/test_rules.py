"""streams/stages/rules.py: pending, firing after ``for``, stopping after ``keep_firing_for`` or when stale."""

from __future__ import annotations

from tailhound.streams.node_state import FiringEntity, NodeState, RuleState
from tailhound.streams.stages import rules, windows
from tests.streams.stages.helpers import T0, ruleset, step_for, vllm

RULES = ruleset("{signal: engine.requests_waiting, above: 5}", extra="        for: 30s\n        keep_firing_for: 30s\n")


def stepped(state, ts, waiting, rule_set=RULES, stale_after_s=120.0):
    """The rules stage on a step whose earlier stages saw `waiting` (engine -> queue) at `ts`."""
    step = step_for(vllm(ts, 0.0), rule_set, state, stale_after_s=stale_after_s)
    step.fresh = step.view = {"engine.requests_waiting": waiting} if waiting else {}
    windows.stage(step)
    assert rules.stage(step) is True
    return step


def test_a_condition_that_holds_is_pending_then_fires_after_for():
    state = NodeState(node="n")
    step = stepped(state, T0, {"0": 9.0, "1": 1.0})
    assert step.pending == {"r"} and step.firing == {}
    assert state.rules["r"].pending == {"0": T0} and not state.rules["r"].firing
    step = stepped(state, T0 + 15, {"0": 9.0, "1": 1.0})
    assert step.firing == {}  # 15 s of 30
    step = stepped(state, T0 + 30, {"0": 9.0, "1": 9.0})
    assert list(step.firing) == ["r"] and step.firing["r"].entities == ["0"] and step.firing["r"].since == T0
    assert step.pending == {"r"}  # engine 1 holds, not yet for 30 s
    assert step.firing["r"].evidence and all(ev.labels.get("engine") == "0" for ev in step.firing["r"].evidence)


def test_a_firing_entity_stops_after_keep_firing_for_false():
    state = NodeState(node="n")
    for ts in (T0, T0 + 30):
        stepped(state, ts, {"0": 9.0})
    assert stepped(state, T0 + 45, {"0": 1.0}).firing["r"].entities == ["0"]  # false for 15 s of 30
    step = stepped(state, T0 + 60, {"0": 1.0})
    assert step.firing == {} and step.pending == set() and "r" not in state.rules


def test_firing_entities_are_listed_in_entity_order():
    state = NodeState(node="n")
    waiting = {str(e): 9.0 for e in (10, 2, 1)}
    for ts in (T0, T0 + 30):
        step = stepped(state, ts, waiting)
    assert step.firing["r"].entities == ["1", "2", "10"]


def test_a_rule_whose_signals_did_not_change_and_that_holds_nothing_is_not_stepped():
    state = NodeState(node="n")
    step = step_for(vllm(T0, 0.0), RULES, state)
    step.fresh = {"gpu.temperature": {"0": 60.0}}
    step.view = {"gpu.temperature": {"0": 60.0}, "engine.requests_waiting": {"0": 9.0}}
    windows.stage(step)
    rules.stage(step)
    assert state.rules == {} and step.pending == set()


def test_an_entity_unseen_past_stale_after_stops_firing():
    state = NodeState(node="n")
    for ts in (T0, T0 + 30):
        stepped(state, ts, {"0": 9.0}, stale_after_s=60.0)
    step = stepped(state, T0 + 100, {}, stale_after_s=60.0)  # nothing of engine 0 for 70 s
    assert step.firing == {} and "r" not in state.rules


def test_the_state_of_a_rule_no_longer_in_the_set_is_dropped():
    state = NodeState(node="n")
    state.rules["gone"] = RuleState(firing={"0": FiringEntity(since=T0, last_true=T0)})
    step = stepped(state, T0 + 15, {"0": 1.0})
    assert "gone" not in state.rules and "gone" not in step.firing
