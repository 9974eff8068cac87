"""The fleet-state memory benchmark still runs, at small sizes (numbers live in BENCHMARKS.md, never in tests)."""

from __future__ import annotations

from bench import fleet_memory, fleet_scale, model_forward, state_size
from bench.__main__ import parse_args


def test_fleet_memory_runs_and_the_cap_bounds_what_is_held():
    result = fleet_memory.run(realistic=(20,), attack=(60,), node_cap=10, model_sizes=(12,), model_cap=4)
    by = {(r["kind"], r["names"], r["cap"]): r for r in result["nodes"]}
    assert by[("attack", 60, None)]["held"] == 60 and by[("attack", 60, 10)]["held"] == 10
    assert by[("attack", 60, 10)]["evicted"] == 50
    assert {(r["cap"], r["held"]) for r in result["models"]} == {(None, 12), (4, 4)}
    text = fleet_memory.report(result)
    assert "streams.max_nodes" in text and "streams.max_models" in text


def test_fleet_memory_is_a_bench_section():
    assert parse_args(["--only", "fleet-memory"]).sections == ["fleet-memory"]


def test_fleet_scale_runs_every_phase_at_small_sizes():
    result = fleet_scale.run(sizes=(2, 5), rounds=1, warm=1)
    small, large = result["rows"]
    assert (small["nodes"], small["ticks"], large["ticks"]) == (2, 2, 5)
    assert set(large["step_us"]) == {"vllm", "dcgm", "node", "blackbox"} and large["add_us"] > 0
    assert large["state_bytes"] > 0 and large["nodes_per_core"] > 0
    assert "model-stage add per engine snapshot" in fleet_scale.report(result)
    assert parse_args(["--only", "fleet-scale"]).sections == ["fleet-scale"]


def test_fleet_scale_runs_in_every_gc_mode():
    result = fleet_scale.run(sizes=(3,), rounds=1, warm=1, gc_modes=fleet_scale.GC_MODES)
    assert [r["gc_mode"] for r in result["rows"]] == list(fleet_scale.GC_MODES)
    assert "GC share" in fleet_scale.report(result)


def test_model_forward_bench_runs_and_reports():
    result = model_forward.run(ticks=2, reps=1)
    assert result["forwards"] > 0 and set(result["rows"]) == {"whole JSON", "compact"}
    assert "CPU per forward" in model_forward.report(result)


def test_state_size_runs_at_a_small_size():
    got = state_size.run(nodes=2, rounds=3)
    assert got["record_bytes"] > 0 and got["us_per_snapshot"] > 0


def test_state_size_breaks_the_live_state_down_by_part():
    got = state_size.run(nodes=2, rounds=3, parts=True)
    parts = got["breakdown"]
    assert {"latency windows", "baselines", "latest values", "records on the table"} <= set(parts)
    assert all(size > 0 for size in parts.values())


def test_state_size_slope_takes_the_fixed_cost_out():
    got = state_size.slope((1, 2), rounds=2)
    assert set(got["growth"]) == {1, 2} and got["per_node"] == got["growth"][2] - got["growth"][1]
    assert "KB per further node" in state_size.report_slope(got)
