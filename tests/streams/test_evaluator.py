from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.incident import Evidence, Scope
from tailhound.streams.evaluator import evaluate, render_action
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0


def run(snapshots):
    state, events = None, []
    for snap in snapshots:
        state, evs = evaluate(state, snap, RULES)
        events += evs
    return state, events


def test_healthy_fleet_fires_nothing():
    _, events = run(dcgm_snapshot(T0 + 15 * i) for i in range(40))
    assert events == []


def test_thermal_throttle_opens_after_one_minute_and_resolves():
    hot = {3: (88.0, 1100.0), 5: (87.0, 1120.0)}
    snaps = [dcgm_snapshot(T0 + 15 * i, hot=hot if 4 <= i < 20 else None) for i in range(30)]
    _, events = run(snaps)
    kinds = [e.event for e in events]
    assert kinds == ["opened", "resolved"]
    opened, resolved = events
    # hot from tick 4 (T0+60); 'for: 1m' holds at tick 8 (T0+120)
    assert opened.ts == T0 + 120
    assert opened.root_cause == "gpu-thermal-throttle"
    assert opened.severity == "critical"
    assert opened.scope.node == "gpu-node-1" and opened.scope.gpus == ["3", "5"]
    assert opened.transient is False
    signals = {(e.signal, e.labels.get("gpu")) for e in opened.evidence}
    assert ("gpu.temperature", "3") in signals and ("gpu.sm_clock_ratio", "5") in signals
    decoded = [e.detail for e in opened.evidence if e.signal == "gpu.clock_event_reasons"]
    assert decoded and decoded[0] == "0x60 (sw_thermal_slowdown, hw_thermal_slowdown)"
    clocks = {e.labels["gpu"]: e.value for e in opened.evidence if e.signal == "gpu.sm_clock"}
    assert clocks == {"3": 1100.0, "5": 1120.0}
    assert any("gpu-node-1" in a and "3,5" in a for a in opened.actions)
    # last hot tick 19 (T0+285); keep_firing_for 1m -> resolved at the first tick >= T0+345
    assert resolved.ts == T0 + 345 and resolved.resolved_at == T0 + 345
    assert resolved.incident_id == opened.incident_id and resolved.sequence == 2


def test_second_gpu_joining_updates_the_incident():
    snaps = [
        dcgm_snapshot(T0 + 15 * i, hot={3: (88, 1100)} if i < 12 else {3: (88, 1100), 5: (90, 1000)}) for i in range(20)
    ]
    _, events = run(snaps)
    assert [e.event for e in events] == ["opened", "updated"]
    assert events[1].scope.gpus == ["3", "5"] and events[1].sequence == 2


def test_hot_but_not_throttled_and_slow_for_another_reason_do_not_fire():
    # GPU 1 hot at full clock; GPU 2 cool and slow because of the power cap (0x4), not heat
    snaps = [
        dcgm_snapshot(T0 + 15 * i, hot={1: (90.0, 1900.0), 2: (70.0, 1000.0)}, reasons={1: 0, 2: 0x4})
        for i in range(20)
    ]
    assert run(snaps)[1] == []


def test_thermal_flags_with_a_clock_drop_fire_below_85c():
    snaps = [dcgm_snapshot(T0 + 15 * i, hot={2: (80.0, 1000.0)}, reasons={2: 0x40}) for i in range(20)]
    events = run(snaps)[1]
    assert [e.event for e in events] == ["opened"] and events[0].scope.gpus == ["2"]


def test_blip_shorter_than_for_does_not_fire():
    snaps = [dcgm_snapshot(T0 + 15 * i, hot={3: (88, 1100)} if i in (5, 6, 7) else None) for i in range(20)]
    assert run(snaps)[1] == []


def test_redelivered_snapshot_changes_nothing():
    hot = {3: (88.0, 1100.0)}
    snaps = [dcgm_snapshot(T0 + 15 * i, hot=hot) for i in range(10)]
    state, events = run(snaps)
    assert [e.event for e in events] == ["opened"]
    again, evs = evaluate(state, snaps[-1], RULES)
    assert evs == [] and again.model_dump() == state.model_dump()


def test_same_input_gives_same_incident_id():
    hot = {3: (88.0, 1100.0)}
    a = run(dcgm_snapshot(T0 + 15 * i, hot=hot) for i in range(10))[1]
    b = run(dcgm_snapshot(T0 + 15 * i, hot=hot) for i in range(10))[1]
    assert a[0].incident_id == b[0].incident_id


def test_state_is_serialisable_and_small():
    state, _ = run(dcgm_snapshot(T0 + 15 * i, hot={3: (88, 1100), 5: (88, 1100)}) for i in range(10))
    dumped = state.model_dump_json()
    # an 8-GPU node: rule states, one open incident, and the rolling baseline of each GPU's SM clock
    # (gpu-thermal-throttle compares a hot GPU's clock with its own usual clock on dcgm-exporter defaults)
    assert len(state.model_dump_json(exclude={"traces"})) < 10_000
    # and the incident's chart traces (bounded in points whatever the incident's length: tests/streams/test_series.py)
    assert 0 < len(dumped) - len(state.model_dump_json(exclude={"traces"})) < 6_000
    assert type(state).model_validate_json(dumped).model_dump() == state.model_dump()


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("drain {node} GPUs {gpus}", "drain n1 GPUs 3,5"),
        ("temp {gpu.temperature} C", "temp 91 C"),
        ("unknown {nope} is n/a", "unknown n/a is n/a"),
        ("TIME-WAIT ({net.time_wait} now), max {max(gpu.temperature)}", "TIME-WAIT (n/a now), max n/a"),
    ],
)
def test_render_action(template, expected):
    evidence = [
        Evidence(signal="gpu.temperature", value=88, op=">="),
        Evidence(signal="gpu.temperature", value=91, op=">="),
    ]
    assert render_action(template, Scope(node="n1", gpus=["3", "5"]), evidence) == expected
