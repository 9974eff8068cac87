"""streams/stages/windows.py: trend histories, demand, rolling baselines, and the context rules are judged in."""

from __future__ import annotations

from tailhound.streams.node_state import FiringEntity, NodeState, RuleState
from tailhound.streams.stages import windows
from tests.streams.stages.helpers import T0, ruleset, step_for, vllm

GROWING = ruleset("{signal: engine.requests_waiting, above: 0, growing_for: 2m}")
BASELINE = ruleset("{signal: engine.requests_waiting, above_baseline: 3.0}")


def windowed(rules, state, ts, fresh, view=None):
    """Run the windows stage on a step whose signals stage produced `fresh` (and the node's `view`)."""
    step = step_for(vllm(ts, 0.0), rules, state)
    step.fresh, step.view = fresh, view if view is not None else fresh
    assert windows.stage(step) is True
    return step


def test_history_is_kept_for_trend_signals_only_and_trimmed_to_the_window():
    state = NodeState(node="n")
    for i in range(20):  # 5 minutes at 15 s against a 2-minute trend: kept back to 1.5 windows (3 min)
        windowed(
            GROWING,
            state,
            T0 + 15 * i,
            {"engine.requests_waiting": {"0": float(i)}, "engine.requests_running": {"0": 1.0}},
        )
    points = state.history["engine.requests_waiting|0"]
    assert list(state.history) == ["engine.requests_waiting|0"]
    assert points[-1] == (T0 + 15 * 19, 19.0) and points[0][0] >= T0 + 15 * 19 - 180
    assert len(points) == 13


def test_history_is_bounded_in_points_whatever_the_window():
    state = NodeState(node="n")
    rules = ruleset("{signal: engine.requests_waiting, above: 0, growing_for: 1h}")
    for i in range(windows.MAX_HISTORY_POINTS + 30):
        windowed(rules, state, T0 + i, {"engine.requests_waiting": {"0": 1.0}})
    assert len(state.history["engine.requests_waiting|0"]) == windows.MAX_HISTORY_POINTS


def test_updated_names_the_fresh_signals_and_what_is_derived_from_them():
    step = windowed(GROWING, NodeState(node="n"), T0, {"gpu.sm_clock": {"0": 1500.0}, "gpu.temperature": {"0": 60.0}})
    assert {"gpu.sm_clock", "gpu.temperature", "gpu.sm_clock_ratio"} <= step.updated
    assert "engine.kv_cache_reserved" not in step.updated
    assert set(windows.DERIVED_BY_INPUT["gpu.sm_clock"]) <= step.updated


def test_the_context_is_at_the_snapshot_time_and_reads_the_history():
    state = NodeState(node="n")
    windowed(GROWING, state, T0, {"engine.requests_waiting": {"0": 2.0}})
    step = windowed(GROWING, state, T0 + 15, {"engine.requests_waiting": {"0": 3.0}})
    assert step.ctx is not None and step.ctx.now == T0 + 15
    assert step.ctx.values["engine.requests_waiting"] == {"0": 3.0}
    assert step.ctx.history("engine.requests_waiting", "0") == [(T0, 2.0), (T0 + 15, 3.0)]
    assert step.ctx.history("engine.requests_waiting", "9") == []


def test_baselines_learn_except_for_an_entity_in_trouble():
    state = NodeState(node="n")
    state.rules["r"] = RuleState(firing={"1": FiringEntity(since=T0 - 60, last_true=T0 - 15)})
    values = {"engine.requests_waiting": {"0": 4.0, "1": 40.0}}
    windowed(BASELINE, state, T0, values)
    assert state.baseline_of("engine.requests_waiting|0") is not None
    assert state.baseline_of("engine.requests_waiting|1") is None  # its own incident must not raise it


def test_baselines_learn_nothing_when_the_signal_is_not_fresh():
    state = NodeState(node="n")
    view = {"engine.requests_waiting": {"0": 4.0}}
    windowed(BASELINE, state, T0, {"gpu.temperature": {"0": 60.0}}, view=view)
    assert state.baseline_of("engine.requests_waiting|0") is None


def test_a_baseline_is_read_as_its_median_once_warm():
    state = NodeState(node="n")
    step = None
    for i in range(4 * 60 * 2):  # two hours at 15 s, well past the warm-up
        step = windowed(BASELINE, state, T0 + 15 * i, {"engine.requests_waiting": {"0": 4.0 + (i % 3)}})
    value, source = step.ctx.baseline("engine.requests_waiting", "0")
    assert 4.0 <= value <= 6.0 and source
    assert step.ctx.baseline("engine.requests_waiting", "7") is None


PERCENTILE = ruleset("{signal: latency.tpot.p95, above_baseline: 2.0}")


def test_a_percentile_baseline_learns_when_its_distribution_is_fresh():
    state = NodeState(node="n")
    view = {"latency.tpot.p95": {"0": 0.05}}
    windowed(PERCENTILE, state, T0, {"latency.tpot": {"0": 0.04}}, view=view)  # the windows' fresh name
    assert state.baseline_of("latency.tpot.p95|0") is not None
    other = NodeState(node="m")
    windowed(PERCENTILE, other, T0, {"gpu.temperature": {"0": 60.0}}, view=view)
    assert other.baseline_of("latency.tpot.p95|0") is None  # nothing it is derived from is new


def test_baseline_steps_are_prepared_once_per_rule_set():
    steps = windows._baseline_steps(PERCENTILE)
    assert windows._baseline_steps(PERCENTILE) is steps
    (only,) = steps
    assert only.base == "latency.tpot.p95" and only.how is None
    assert {"latency.tpot.p95", "latency", "latency.tpot"} <= only.triggers
    assert windows._baseline_steps(BASELINE) is not steps
