"""streams/stages/__init__.py and step.py: the stages in order, one signature, a False ends the pipeline."""

from __future__ import annotations

from tailhound.streams import stages
from tailhound.streams.evaluator import evaluate
from tailhound.streams.node_state import NodeState
from tests.streams.stages.helpers import T0, ruleset, step_for, vllm

RULES = ruleset("{signal: engine.requests_waiting, above: 5}")


def test_the_pipeline_runs_the_stage_modules_in_order_under_their_metric_names():
    assert len(stages.PIPELINE) == len(stages.STAGE_NAMES) == 5
    for name, stage in zip(stages.STAGE_NAMES, stages.PIPELINE, strict=True):
        assert stage.__module__ == f"tailhound.streams.stages.{name}" and stage.__name__ == "stage"


def test_every_stage_fills_its_part_of_the_step_and_returns_true():
    step = step_for(vllm(T0, 9.0), RULES)
    for stage in stages.PIPELINE:
        assert stage(step) is True
    assert step.fresh["engine.requests_waiting"] == {"0": 9.0}
    assert step.ctx is not None and "engine.requests_waiting" in step.updated
    assert [e.event for e in step.events] == ["opened"]  # `for: 0`: fires at once


def test_steps_do_not_share_their_collections():
    a, b = step_for(vllm(T0, 1.0), RULES), step_for(vllm(T0, 1.0), RULES)
    a.updated.add("x")
    a.pending.add("r")
    a.events.append(None)
    assert b.updated == set() and b.pending == set() and b.events == []


def test_a_stage_that_returns_false_ends_the_pipeline_with_no_events():
    state, events = evaluate(None, vllm(T0, 9.0), RULES)
    assert [e.event for e in events] == ["opened"]
    again, events = evaluate(state, vllm(T0, 9.0), RULES)  # admit stops a redelivery
    assert events == [] and again.rules == state.rules and again.incidents == state.incidents
    assert isinstance(again, NodeState)
