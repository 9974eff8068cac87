"""Chart series of incidents (streams/evidence_traces.py): recorded from the first pending step, peers at the same
moments, bounded however long the incident, carried on every event, dropped when nothing needs them."""

from __future__ import annotations

from pathlib import Path

from tailhound.incident import MAX_SERIES, MAX_SERIES_ENTITIES, MAX_SERIES_POINTS, Evidence
from tailhound.streams.evidence_traces import MAX_TRACES, SeriesTrace, export, prune, record
from tailhound.streams.ruleset.condition_eval import EvalContext
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot
from tests.streams.test_evaluator import run

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
HOT = {3: (88.0, 1100.0), 5: (87.0, 1120.0)}


def test_a_thermal_incident_carries_the_hot_gpus_their_peers_threshold_and_for_window():
    snaps = [dcgm_snapshot(T0 + 15 * i, hot=HOT if 4 <= i < 20 else None) for i in range(30)]
    _, events = run(snaps)
    opened, resolved = events
    temp = next(s for s in opened.series if s.signal == "gpu.temperature")
    assert temp.rule == "gpu-thermal-throttle" and temp.per == "gpu" and temp.unit
    assert temp.focus == ["3", "5"] and set(temp.peers()) == {"0", "1", "2", "4", "6", "7"}
    assert temp.threshold == 85 and temp.op == ">=" and temp.for_s == 60
    # recorded from the first hot tick (pending, T0+60) to the opening (T0+120): the `for` window
    assert temp.pending_since == T0 + 60 and temp.ts[0] == T0 + 60 and temp.ts[-1] == T0 + 120
    assert temp.values["3"][-1] == 88 and temp.values["0"][-1] == 62
    assert all(len(v) == len(temp.ts) for v in temp.values.values())
    clock = next(s for s in opened.series if s.signal == "gpu.sm_clock")  # the context: the clock vs its peers
    assert clock.values["3"][-1] == 1100 and clock.values["1"][-1] == 1965
    # the resolved event carries the whole incident: the recovered GPUs go on as their peers do
    final = next(s for s in resolved.series if s.signal == "gpu.temperature")
    assert final.ts[0] == T0 + 60 and final.ts[-1] == resolved.ts - 15  # through keep_firing_for
    assert final.values["3"][-1] == 62 and final.focus == ["3", "5"]
    assert len(opened.series) <= MAX_SERIES and opened.series[0].rule == opened.rule


def test_series_stay_bounded_over_a_long_incident_and_span_it_whole():
    snaps = [dcgm_snapshot(T0 + 15 * i, hot=HOT) for i in range(400)]  # 100 minutes firing
    state, events = run(snaps)
    assert [e.event for e in events] == ["opened"]
    for trace in state.traces.values():
        assert len(trace.ts) <= MAX_SERIES_POINTS and trace.ts[0] == T0
        assert trace.ts[-1] == T0 + 15 * 399  # the newest point is always the latest step
        assert all(len(v) == len(trace.ts) for v in trace.values.values())
        assert all(b - a > 0 for a, b in zip(trace.ts, trace.ts[1:], strict=False))
    assert 0 < len(state.model_dump_json(include={"traces"})) < 24_000


def test_traces_are_dropped_once_no_rule_holds_and_no_incident_is_open():
    snaps = [dcgm_snapshot(T0 + 15 * i, hot=HOT if i < 12 else None) for i in range(40)]
    state, events = run(snaps)
    assert [e.event for e in events] == ["opened", "resolved"]
    assert state.traces == {}
    # a blip shorter than `for` records while pending, then is forgotten
    state, events = run([dcgm_snapshot(T0 + 15 * i, hot=HOT if i in (2, 3) else None) for i in range(10)])
    assert events == [] and state.traces == {}


def test_the_state_round_trips_with_its_traces():
    state, _ = run(dcgm_snapshot(T0 + 15 * i, hot=HOT) for i in range(10))
    again = type(state).model_validate_json(state.model_dump_json())
    assert again.traces == state.traces and again.traces


def _ctx(now: float, values: dict) -> EvalContext:
    return EvalContext(now=now, values=values)


def test_record_bounds_entities_and_traces_and_ignores_older_points():
    traces: dict[str, SeriesTrace] = {}
    many = {str(i): float(i) for i in range(40)}
    ev = Evidence(signal="gpu.temperature", value=91.0, op=">=", threshold=85)
    record(traces, "r", 60, "gpu", "3", T0, [ev], _ctx(T0, {"gpu.temperature": many}))
    record(traces, "r", 60, "gpu", "3", T0, [ev], _ctx(T0 - 30, {"gpu.temperature": many}))  # older: ignored
    (trace,) = traces.values()
    assert trace.focus == ["3"] and list(trace.values)[0] == "3"
    assert len(trace.values) == MAX_SERIES_ENTITIES and trace.ts == [T0]
    for i in range(MAX_TRACES + 5):
        record(traces, f"rule-{i}", 0, "node", "", T0, [Evidence(signal="x", value=1, op=">")], _ctx(T0, {}))
    assert len(traces) == MAX_TRACES
    prune(traces, {"r"})
    assert list(traces) == ["r|gpu.temperature"]


def test_export_names_node_level_values_after_the_node_and_rounds():
    traces: dict[str, SeriesTrace] = {}
    ev = Evidence(signal="sum(engine.requests_waiting)", value=12.3456789, op=">", threshold=2, baseline=1.5)
    record(traces, "capacity-exhausted", 120, "node", "", T0, [ev], _ctx(T0, {}))
    out = export(next(iter(traces.values())), "gpu-node-4")
    assert out.focus == ["gpu-node-4"] and out.values == {"gpu-node-4": [12.35]}
    assert out.baseline == {"gpu-node-4": [1.5]} and out.per == ""


def test_the_wire_model_refuses_ragged_unbounded_or_non_finite_series():
    import pytest
    from pydantic import ValidationError

    from tailhound.incident import EvidenceSeries

    ok = dict(rule="r", signal="s", ts=[T0, T0 + 15], values={"0": [1.0, None]})
    assert EvidenceSeries(**ok).values == {"0": [1.0, None]}
    for bad in (
        {"values": {"0": [1.0]}},  # not aligned with ts
        {"values": {str(i): [1.0, 2.0] for i in range(MAX_SERIES_ENTITIES + 1)}},
        {"values": {"0": [float("nan"), 1.0]}},
        {"ts": [T0 + i for i in range(MAX_SERIES_POINTS + 1)], "values": {}},
    ):
        with pytest.raises(ValidationError):
            EvidenceSeries(**{**ok, **bad})
    # a value that is not finite is recorded as no value
    traces: dict[str, SeriesTrace] = {}
    record(traces, "r", 0, "node", "", T0, [Evidence(signal="x", value=1, op=">")], _ctx(T0, {}))
    record(traces, "r", 0, "node", "", T0, [Evidence(signal="x", value=float("inf"), op=">")], _ctx(T0 + 1, {}))
    assert export(traces["r|x"], "n1").values == {"n1": [1.0, None]}


def test_a_slow_node_is_charted_against_the_models_other_engines():
    """The model stage's peer rule (node-slower-than-peers) records every engine of the model: the slow node's
    TPOT against the others', and the median it was compared with (scenario slow-node-early)."""
    from tests.scenarios import suite

    events, _ = suite.replay(suite.SCENARIOS["slow-node-early"])
    opened = next(e for e in events if e.event == "opened" and e.rule == "node-slower-than-peers")
    tpot = next(s for s in opened.series if s.signal == "model.engine_tpot_mean")
    assert tpot.per == "engine" and tpot.focus == ["gpu-node-2/0"] and len(tpot.peers()) >= 2
    assert tpot.baseline_of == "peers" and tpot.threshold
    slow, others = tpot.values["gpu-node-2/0"][-1], [tpot.values[p][-1] for p in tpot.peers()]
    assert all(o is not None and slow > 1.2 * o for o in others)
