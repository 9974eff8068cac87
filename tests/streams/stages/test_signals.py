"""streams/stages/signals.py: samples -> canonical values in the node's view, models served, per-model SLA."""

from __future__ import annotations

from tailhound.streams.latest_values import CurrentValues
from tailhound.streams.node_state import NodeState
from tailhound.streams.stages import signals
from tests.factories import dcgm_snapshot
from tests.streams.stages.helpers import T0, ruleset, step_for, vllm

RULES = ruleset("{signal: engine.requests_waiting, above: {signal: sla.ttft_p99}}")


def test_samples_become_canonical_values_in_fresh_and_in_the_view():
    step = step_for(dcgm_snapshot(T0, hot={3: (88.0, 1100.0)}), RULES)
    assert signals.stage(step) is True
    assert step.fresh["gpu.temperature"]["3"] == 88.0 and step.fresh["gpu.temperature"]["0"] == 62.0
    assert step.fresh["gpu.sm_clock"]["3"] == 1100.0
    assert isinstance(step.view, CurrentValues)
    assert step.view.get("gpu.temperature")["3"] == 88.0


def test_the_view_keeps_what_other_sources_reported_while_fresh_has_only_this_snapshot():
    state = NodeState(node="gpu-node-1")
    first = step_for(dcgm_snapshot(T0), RULES, state)
    signals.stage(first)
    second = step_for(vllm(T0 + 5, 4.0, node="gpu-node-1"), RULES, state, latest=first.latest)
    signals.stage(second)
    assert "gpu.temperature" not in second.fresh and second.fresh["engine.requests_waiting"] == {"0": 4.0}
    assert second.view.get("gpu.temperature")["0"] == 62.0  # dcgm's value, still current


def test_models_and_engines_are_remembered_sorted_and_bounded():
    state = NodeState(node="n")
    for i, model in enumerate(["m-b", "m-a", "m-b"]):
        signals.stage(step_for(vllm(T0 + i, 1.0, engine=str(i), model=model), RULES, state))
    assert state.model_names == ["m-a", "m-b"]
    assert state.engine_models == {"0": "m-b", "1": "m-a", "2": "m-b"}
    for i in range(12):
        signals.stage(step_for(vllm(T0 + 10 + i, 1.0, engine="9", model=f"x-{i:02d}"), RULES, state))
    assert len(state.model_names) == 8 and state.model_names == sorted(state.model_names)


def test_sla_per_engine_from_its_model_first_matching_pattern_wins():
    state = NodeState(node="n")
    sla = {"ttft_p99_sla_s": {"batch-*": 10.0, "*": 1.5}}
    signals.stage(step_for(vllm(T0, 1.0, engine="0", model="batch-70b", running=1.0), RULES, state, sla=sla))
    step = step_for(vllm(T0 + 1, 1.0, engine="1", model="chat-8b", running=1.0), RULES, state, sla=sla)
    signals.stage(step)
    assert step.view.get("sla.ttft_p99") == {"0": 10.0, "1": 1.5}


def test_sla_defaults_to_1_5_s_and_a_pattern_that_matches_nothing_gives_no_limit():
    step = step_for(vllm(T0, 1.0, model="chat-8b", running=1.0), RULES)
    signals.stage(step)
    assert step.view.get("sla.ttft_p99") == {"0": 1.5}
    step = step_for(vllm(T0, 1.0, model="chat-8b", running=1.0), RULES, sla={"ttft_p99_sla_s": {"batch-*": 10.0}})
    signals.stage(step)
    assert not step.view.get("sla.ttft_p99")


def test_a_plain_dict_view_gets_the_sla_computed_at_once():
    state = NodeState(node="n", engine_models={"0": "chat-8b"})
    view: dict = {"engine.requests_running": {"0": 1.0}}
    signals._add_sla(view, state, None)
    assert view["sla.ttft_p99"] == {"0": 1.5}
