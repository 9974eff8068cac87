"""Load traces: the bounded CSV loader, the looped and scaled arrival process, and a fleet driven by a trace."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator import trace as trace_mod
from tailhound.agents.simulator.engine import Engine
from tailhound.agents.simulator.engine_params import MEAN_GEN, MEAN_PROMPT, mix_capacity_rps
from tailhound.agents.simulator.faults import NodeEffects
from tailhound.agents.simulator.trace import TraceLoad, load_trace, parse_trace
from tailhound.cli import app

HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"


def _csv(rows: list[tuple[float, int, int]], header: str = HEADER) -> str:
    return header + "".join(f"{t},{p},{g}\n" for t, p, g in rows)


def _on_off(bursts: int = 4, per_burst: int = 300) -> str:
    """An on/off trace: silence for 45 s, then `per_burst` requests within 15 s, `bursts` times."""
    rows = []
    for b in range(bursts):
        start = 60.0 * b + 45.0
        rows += [(start + 15.0 * k / per_burst, 1000 + k, 20 + k % 50) for k in range(per_burst)]
    return _csv(rows)


def test_parse_reads_the_three_columns_in_any_order_with_extra_ones() -> None:
    text = "num_decode_tokens,extra,arrived_at,num_prefill_tokens\n10,x,0.0,100\n20,y,1.5,200\n"
    tr = parse_trace(text)
    assert tr.arrivals == (0.0, 1.5)
    assert tr.prompts == (100, 200)
    assert tr.outputs == (10, 20)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty trace"),
        ("arrived_at,num_prefill_tokens\n0,1\n1,2\n", "missing column(s) num_decode_tokens"),
        (HEADER + "0,10,5\nsoon,10,5\n", "line 3: arrived_at 'soon' is not a number"),
        (HEADER + "0,10,5\nnan,10,5\n", "line 3: arrived_at must be a finite number"),
        (HEADER + "0,10,5\n1,-3,5\n", "must be a finite number >= 0"),
        (HEADER + "2,10,5\n1,10,5\n", "line 3: arrived_at 1.0 is before the previous request's"),
        (HEADER + "0,10,5\n1,10,0\n", "token counts must be 1.."),
        (HEADER + "0,10,5\n1,10\n", "line 3: 2 fields"),
        (HEADER + "0,10,5\n", "at least two requests"),
        (HEADER + "3,10,5\n3,10,5\n", "at least two requests at different times"),
    ],
)
def test_parse_rejects_bad_traces_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_trace(text)
    assert message in str(err.value)


def test_reading_is_bounded_in_rows_and_bytes(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.csv"
    path.write_text(_csv([(float(i), 10, 5) for i in range(50)]))
    monkeypatch.setattr(trace_mod, "MAX_TRACE_ROWS", 49)
    with pytest.raises(ValueError, match="more than 49 requests"):
        load_trace(path)
    monkeypatch.setattr(trace_mod, "MAX_TRACE_ROWS", 50)
    assert len(load_trace(path).arrivals) == 50
    monkeypatch.setattr(trace_mod, "MAX_TRACE_BYTES", path.stat().st_size - 1)
    with pytest.raises(ValueError, match="larger than"):
        load_trace(path)
    path.write_bytes(HEADER.encode() + b"0,10,5\n1,\xff0,5\n")
    monkeypatch.setattr(trace_mod, "MAX_TRACE_BYTES", 1024)
    with pytest.raises(ValueError, match="not UTF-8"):
        load_trace(path)


def test_window_loops_with_one_mean_gap_at_the_seam() -> None:
    tr = parse_trace(_csv([(0.0, 1, 1), (10.0, 2, 2), (20.0, 3, 3)]))
    assert tr.period_s == 30.0  # span 20 s + one mean gap of 10 s
    assert tr.window(0.0, 15.0) == [0, 1]
    assert tr.window(15.0, 30.0) == [2]
    assert tr.window(25.0, 45.0) == [0, 1]  # 30 and 40 s are the second loop's 0 and 10 s
    assert tr.window(0.0, 65.0) == [0, 1, 2, 0, 1, 2, 0]  # longer than a period: every loop counts
    assert tr.mean_rps == pytest.approx(0.1)


def test_peak_rate_is_the_busiest_aligned_window() -> None:
    tr = parse_trace(_on_off(bursts=2, per_burst=120))
    assert tr.peak_rps(60.0) == pytest.approx(2.0)
    assert tr.peak_rps(15.0) == pytest.approx(8.0)


def test_trace_load_splits_the_scaled_window_by_share() -> None:
    """Each node's mean is window x scale x share / nodes; the requests are the window's own."""
    tr = parse_trace(_csv([(float(i) / 10.0, 100 + i, 7) for i in range(300)]))
    load = TraceLoad(tr, scale=2.0, nodes=4)
    rng = random.Random(1)
    counts = {0.5: 0, 1.5: 0}
    seen = set()
    ticks = 400
    for k in range(ticks):
        t = 15.0 * (k % 2)  # alternate two windows of 150 requests each
        for share in counts:
            got = load.node_requests(rng, t, 15.0, share)
            counts[share] += len(got)
            seen.update(p for p, _ in got)
    # 150 requests a window x 2 / 4 nodes = 75 a tick at share 1
    assert counts[0.5] / ticks == pytest.approx(37.5, rel=0.05)
    assert counts[1.5] / ticks == pytest.approx(112.5, rel=0.05)
    assert seen <= set(tr.prompts) and len(seen) > 250
    assert load.node_requests(rng, 30.0, 15.0, 1.0)  # the trace loops: 30 s is its second loop's start
    gappy = TraceLoad(parse_trace(_csv([(0.0, 1, 1), (1.0, 1, 1), (100.0, 1, 1)])), scale=1.0, nodes=1)
    assert gappy.node_requests(rng, 30.0, 15.0, 1.0) == []  # no request in the window, none for any node
    with pytest.raises(ValueError):
        TraceLoad(tr, scale=0.0, nodes=1)


def test_engine_serves_the_trace_tokens_and_its_queue_matches_its_count() -> None:
    eng = Engine(random.Random(2), "m")
    reqs = [(500 + i, 30 + i % 9) for i in range(40)]
    eng.step(15.0, len(reqs), NodeEffects(), 1.0, reqs)
    assert eng.prompt_tokens == sum(p for p, _ in reqs)
    assert eng.generation_tokens == sum(g for _, g in reqs)
    # far over capacity: the queue keeps exactly the requests the count says wait, FIFO
    flood = [(2000, 200)] * 8000
    eng.step(15.0, len(flood), NodeEffects(), 1.0, flood)
    assert eng.waiting > 0
    assert len(eng.trace_queue.pending) == eng.waiting
    served_before, tokens_before = eng.success["stop"] + eng.success["length"], eng.prompt_tokens
    eng.step(15.0, 0, NodeEffects(), 1.0, [])
    served = eng.success["stop"] + eng.success["length"] - served_before
    assert served > 0 and eng.prompt_tokens - tokens_before == 2000 * served  # the flood's own requests


def test_engine_queue_stays_in_step_under_storm_tgi_overload_and_restart() -> None:
    for kind, effects in (
        ("vllm", NodeEffects(retry_storm=True)),
        ("tgi", NodeEffects()),
        ("vllm", NodeEffects(long_gen_share=0.65)),
    ):
        eng = Engine(random.Random(3), "m", kind=kind)
        for k in range(12):
            reqs = [] if k % 4 == 3 else [(3000, 300)] * (3000 if k < 6 else 20)
            eng.step(15.0, len(reqs), effects, 1.0, reqs)
            assert len(eng.trace_queue.pending) == eng.waiting, (kind, k)
        eng.restart()
        assert not eng.trace_queue.pending and eng.waiting == 0


def test_mix_capacity_matches_the_engine_at_saturation() -> None:
    """The capacity a trace is scaled against is the engine's own: flooded, it completes that many a second."""
    eng = Engine(random.Random(4), "m")
    reqs = [(1200, 200)] * 4000
    for _ in range(3):
        eng.step(15.0, len(reqs), NodeEffects(), 1.0, reqs)
    assert eng.last.completed_rps == pytest.approx(mix_capacity_rps(1200, 200), rel=0.02)
    assert mix_capacity_rps(MEAN_PROMPT, MEAN_GEN) > mix_capacity_rps(4 * MEAN_PROMPT, MEAN_GEN)


def _fleet(tmp_path, text: str, **kw) -> FleetSimulator:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return FleetSimulator(SimConfig(nodes=2, load_trace=str(path), **kw))


def _arrivals_per_tick(sim: FleetSimulator, minutes: float) -> list[int]:
    """New requests the fleet's engines got, tick by tick."""
    got: list[int] = []
    for node in sim._nodes:

        def step(*args, _orig=node.engine.step, **kw):
            got.append(args[1])
            return _orig(*args, **kw)

        node.engine.step = step
    n = len(sim._nodes)
    list(sim.run(minutes * 60))
    return [sum(got[k : k + n]) for k in range(0, len(got), n)]


def test_fleet_follows_the_trace_burst_from_nothing(tmp_path) -> None:
    """An on/off trace reaches the engines on/off: silent ticks, then a tick with the whole burst."""
    sim = _fleet(tmp_path, _on_off(), noise="realistic")
    assert sim._noise is None  # the trace carries the fleet-wide swings: the profile adds none of its own
    per_tick = _arrivals_per_tick(sim, 4)
    assert per_tick[:3] == [0, 0, 0]
    burst = per_tick[3]
    # the busiest minute (300 requests) is scaled to 80 % of two engines' capacity for this mix
    cap = mix_capacity_rps(*sim.trace_load.trace.mean_tokens())
    assert burst == pytest.approx(0.8 * 2 * cap * 60.0, rel=0.15)
    assert per_tick[4:7] == [0, 0, 0] or max(per_tick[4:7]) < burst / 4  # what waited drains after it


def test_fleet_with_a_trace_is_deterministic_and_the_peak_scales_it(tmp_path) -> None:
    text = _csv([(i * 0.25, 800 + 7 * (i % 50), 50 + i % 30) for i in range(2400)])
    a, b = _fleet(tmp_path, text), _fleet(tmp_path, text)
    assert [s.model_dump() for _, snaps in a.run(300) for s in snaps] == [
        s.model_dump() for _, snaps in b.run(300) for s in snaps
    ]
    half = _fleet(tmp_path, text, load_trace_peak=0.4)
    assert half.trace_load.scale == pytest.approx(a.trace_load.scale / 2)
    full, low = _arrivals_per_tick(_fleet(tmp_path, text), 5), _arrivals_per_tick(half, 5)
    assert sum(low) == pytest.approx(sum(full) / 2, rel=0.1)


def test_faults_still_act_on_trace_driven_arrivals(tmp_path) -> None:
    text = _csv([(i * 0.25, 800, 50) for i in range(2400)])
    path = tmp_path / "t.csv"
    path.write_text(text)
    base = FleetSimulator(SimConfig(nodes=2, load_trace=str(path)))
    surge = FleetSimulator(SimConfig(nodes=2, load_trace=str(path)), [FaultSpec.parse("traffic-surge@0")])
    b, s = sum(_arrivals_per_tick(base, 5)), sum(_arrivals_per_tick(surge, 5))
    assert s > 2.0 * b


def test_config_validates_the_trace_options() -> None:
    for bad in (0.0, -1.0, 5.0, float("nan")):
        with pytest.raises(ValueError, match="load_trace_peak"):
            SimConfig(load_trace_peak=bad)
    with pytest.raises(ValueError, match="empty path"):
        SimConfig(load_trace=" ")


def test_simulate_records_a_trace_driven_fleet_and_reports_a_bad_trace(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(_on_off(bursts=1))
    out = tmp_path / "fleet.jsonl"
    runner = CliRunner()
    ok = runner.invoke(
        app,
        [
            "simulate",
            "--record",
            str(out),
            "--minutes",
            "1",
            "--nodes",
            "1",
            "--no-progress",
            "--load-trace",
            str(path),
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert out.stat().st_size > 0
    path.write_text(HEADER + "0,1,1\n")
    bad = runner.invoke(app, ["simulate", "--record", str(out), "--minutes", "1", "--load-trace", str(path)])
    assert bad.exit_code != 0
    assert "at least two requests" in str(bad.exception)  # a TailhoundError: main() prints it, no traceback


@pytest.mark.parametrize("name", ["conv", "code"])
def test_the_public_traces_load_within_bounds(name: str) -> None:
    """The shared Azure traces (not in the wheel): shapes as their README measures them."""
    path = SHARED / f"azure_llm_2023_{name}.csv"
    if not path.is_file():
        import os

        message = f"needs {path} (the public request traces, ../shared/data/traces next to the checkout)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + "; CI must run it, not skip it")
        pytest.skip(message)
    tr = load_trace(path)
    per_15s = tr.peak_rps(15.0) / tr.mean_rps
    if name == "code":
        assert len(tr.arrivals) == 8819 and per_15s > 10  # on/off: 15 s windows up to ~12x the mean
    else:
        assert len(tr.arrivals) == 19366 and per_15s < 2


def test_demo_refuses_a_bad_trace_before_starting_anything(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("arrived_at,num_prefill_tokens\n0,1\n")
    result = CliRunner().invoke(app, ["demo", "--load-trace", str(path), "--console", ""])
    assert result.exit_code != 0
    assert "missing column(s) num_decode_tokens" in str(result.exception)
