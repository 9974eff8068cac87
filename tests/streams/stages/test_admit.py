"""streams/stages/admit.py: a snapshot no newer than the last one from its source and instance changes nothing."""

from __future__ import annotations

from tailhound.streams.node_state import NodeState
from tailhound.streams.stages import admit
from tests.streams.stages.helpers import T0, ruleset, step_for, vllm

RULES = ruleset("{signal: engine.requests_waiting, above: 5}")


def test_first_snapshot_is_admitted_and_remembered_per_source():
    state = NodeState(node="n")
    assert admit.stage(step_for(vllm(T0, 1.0), RULES, state)) is True
    assert state.last_ts == {"vllm": T0}


def test_a_redelivery_or_an_older_snapshot_stops_the_pipeline_and_keeps_the_newest_time():
    state = NodeState(node="n")
    assert admit.stage(step_for(vllm(T0 + 15, 1.0), RULES, state))
    assert admit.stage(step_for(vllm(T0 + 15, 9.0), RULES, state)) is False  # same time: a redelivery
    assert admit.stage(step_for(vllm(T0, 9.0), RULES, state)) is False  # older
    assert state.last_ts == {"vllm": T0 + 15}
    assert admit.stage(step_for(vllm(T0 + 30, 1.0), RULES, state)) is True
    assert state.last_ts == {"vllm": T0 + 30}


def test_two_instances_of_one_source_on_a_node_are_admitted_apart():
    state = NodeState(node="n")
    assert admit.stage(step_for(vllm(T0 + 15, 1.0, labels={"instance": "a:8000"}), RULES, state))
    # behind instance a, but the first from instance b: not a redelivery
    assert admit.stage(step_for(vllm(T0, 1.0, labels={"instance": "b:8000"}), RULES, state))
    assert admit.stage(step_for(vllm(T0, 1.0, labels={"instance": "b:8000"}), RULES, state)) is False
    assert state.last_ts == {"vllm|a:8000": T0 + 15, "vllm|b:8000": T0}


def test_a_rejected_snapshot_leaves_the_step_unfilled():
    state = NodeState(node="n")
    admit.stage(step_for(vllm(T0, 1.0), RULES, state))
    step = step_for(vllm(T0, 50.0), RULES, state)
    assert admit.stage(step) is False
    assert step.fresh == {} and step.view == {} and step.ctx is None and step.events == []
