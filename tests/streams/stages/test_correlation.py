"""streams/stages/correlation.py: the firing rules -> incident events with their charts; unneeded traces go."""

from __future__ import annotations

from tailhound.incident import IncidentEvent
from tailhound.streams.node_state import NodeState
from tailhound.streams.stages import correlation, rules, windows
from tests.streams.stages.helpers import T0, ruleset, step_for, vllm

RULES = ruleset("{signal: engine.requests_waiting, above: 5}", root_cause="capacity", extra="        for: 30s\n")


def correlated(state, ts, waiting):
    step = step_for(vllm(ts, 0.0), RULES, state)
    step.fresh = step.view = {"engine.requests_waiting": {"0": waiting}}
    windows.stage(step)
    rules.stage(step)
    assert correlation.stage(step) is True
    return step


def test_a_firing_cause_opens_an_incident_with_its_rule_chart():
    state = NodeState(node="n")
    assert correlated(state, T0, 9.0).events == []  # pending
    step = correlated(state, T0 + 30, 9.0)
    [opened] = step.events
    assert opened.event == "opened" and opened.root_cause == "capacity" and opened.rule == "r"
    assert opened.series and {s.rule for s in opened.series} == {"r"}
    assert state.incidents


def test_nothing_firing_gives_no_events_and_drops_the_traces_of_rules_that_hold_nothing():
    state = NodeState(node="n")
    correlated(state, T0, 9.0)
    assert state.traces  # the pending rule's evidence is charted
    step = correlated(state, T0 + 15, 1.0)
    assert step.events == [] and state.traces == {}


def test_an_incident_lists_its_root_rule_first():
    ev = IncidentEvent.model_construct(rule="root", labels={"rules": "a,root,b"})
    assert correlation._rules_of(ev) == ["root", "a", "b"]
    assert correlation._rules_of(IncidentEvent.model_construct(rule="root", labels={})) == ["root"]
