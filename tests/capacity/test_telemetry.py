"""Capacity from recorded telemetry: a simulated vLLM fleet whose daily load ramps past a known saturation point.

The simulated engine (agents/simulator/engine_params.py) serves at most ``capacity_rps = b_cap / (prefill + mean_gen
x s_dec x (ITL_BASE + c_eff x b_cap))`` requests/s and queues the rest (a fluid queue). A healthy engine
saturates at ~12.5 requests/s, above the daily peak of ~10; with the ``slow-node`` fault on every node (decode
1.7x, prefill 1.2x slower) it saturates at ~7.3 requests/s, and the daily curve from 09:00 to 16:00 UTC ramps
each node's load from ~4.5 to ~9 requests/s: past the saturation point.

Tolerances (measured: knee 6.48 vs 7.34, 0.88x; plateau 7.28, 0.99x; max_num_seqs 112 vs 111):

- the TTFT P95 knee lies within [0.85, 1.05] x the capacity. It comes *below* the fluid capacity because a
  60 s window at a mean load of ~90 % of capacity already holds 15 s ticks above it (Poisson arrivals: +-10 %
  per tick, plus the load's drift), and those queue: that is where the P95 bends;
- the throughput plateau (its level) is within 5 % of the capacity;
- max_num_seqs is within 15 % of where, in the engine's law, TPOT grows faster than throughput:
  c_eff x batch = ITL_BASE (see tailhound/capacity/recommend.py), batch = ITL_BASE / c_eff ~ 111.
"""

from __future__ import annotations

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator import engine_params as E
from tailhound.agents.simulator import faults as F
from tailhound.agents.simulator.recording import iter_records
from tailhound.capacity.telemetry import bin_windows, points_by_model, recommend_from_telemetry, telemetry_windows

MODEL = SimConfig().model
NINE_UTC = 1_767_225_600.0 + 9 * 3600  # 2026-01-01 09:00 UTC, near the daily trough
MINUTES = 420


def _ctx() -> float:
    return E.MEAN_PROMPT + E.MEAN_GEN / 2


def capacity_rps(s_dec: float, s_pre: float) -> float:
    """engine.py's capacity formula for the default request mix."""
    ctx = _ctx()
    c_eff = E.ITL_PER_SEQ_S + E.ITL_PER_KV_TOKEN_S * ctx
    prefill = s_pre * (E.PREFILL_OVERHEAD_S + E.MEAN_PROMPT / E.PREFILL_TOKENS_PER_S)
    b_cap = min(float(E.MAX_NUM_SEQS), 0.97 * E.KV_CAPACITY_TOKENS / ctx)
    return b_cap / (prefill + E.MEAN_GEN * s_dec * (E.ITL_BASE_S + c_eff * b_cap))


SATURATION = capacity_rps(F.SLOW_NODE_DECODE_SLOWDOWN, F.SLOW_NODE_PREFILL_SLOWDOWN)
OUTPACE_BATCH = E.ITL_BASE_S / (E.ITL_PER_SEQ_S + E.ITL_PER_KV_TOKEN_S * _ctx())


@pytest.fixture(scope="module")
def slow_fleet():
    sim = FleetSimulator(
        SimConfig(nodes=2, sources=("vllm",), start_ts=NINE_UTC, seed=3), [FaultSpec("slow-node", 0, node="*")]
    )
    records = list(iter_records(sim, MINUTES))
    return records


def test_the_known_saturation_point():
    assert capacity_rps(1.0, 1.0) == pytest.approx(12.46, abs=0.05)  # "about 12 requests/s" (load.py)
    assert abs(SATURATION - 7.34) < 0.02
    assert abs(OUTPACE_BATCH - 111.3) < 0.5


def test_knee_plateau_and_max_num_seqs_from_simulated_telemetry(slow_fleet):
    """What the analysis finds (how long it takes: bench/offline_tools.py)."""
    records = slow_fleet
    [analysis] = recommend_from_telemetry(records, source="telemetry:slow.jsonl")
    rec = analysis.recommendation
    assert rec.model == MODEL and rec.source == "telemetry:slow.jsonl" and rec.load_unit == "requests_per_s"
    assert rec.ttft_knee is not None
    assert 0.85 * SATURATION <= rec.ttft_knee.load <= 1.05 * SATURATION, (rec.ttft_knee, SATURATION)
    assert rec.ttft_knee.latency_s < 1.0  # the bend, not the queue after it
    # TPOT grows with the batch, and the batch grows ever faster as the load nears saturation (Little's law
    # with a TPOT that rises with the batch): judged up to the plateau, it bends before TTFT does (~0.7x)
    assert rec.tpot_knee is not None and 0.6 * SATURATION <= rec.tpot_knee.load <= rec.ttft_knee.load
    assert rec.safe_request_rate == pytest.approx(rec.tpot_knee.load, rel=0.02)  # the more conservative knee
    assert abs(rec.throughput_plateau_rps - SATURATION) / SATURATION <= 0.05
    assert abs(rec.recommended_max_num_seqs - OUTPACE_BATCH) / OUTPACE_BATCH <= 0.15
    assert rec.keda == {"queue": rec.queue_scale_out, "batch": round(0.8 * rec.recommended_max_num_seqs, 1)}
    assert 1.0 <= rec.queue_scale_out <= 5.0  # no queue below the knee
    assert analysis.notes[0].endswith("windows of 60 s")


def test_windows_measure_load_throughput_and_queue(slow_fleet):
    records = slow_fleet
    windows = telemetry_windows(records[: len(records) // 3])  # the first ~2 h: below saturation
    assert {w.node for w in windows} == {"gpu-node-1", "gpu-node-2"} and {w.engine for w in windows} == {"0"}
    assert all(w.model == MODEL for w in windows)
    assert len(windows) >= 2 * 130
    for w in windows:  # no queue: the arrivals are what is served
        assert w.queue == 0.0 and w.load == pytest.approx(w.throughput, rel=0.05)
        assert w.ttft.p95 is not None and w.ttft.count >= 20 and w.running > 0
        assert w.ttft.p50 <= w.ttft.p95 <= w.ttft.p99
    points = bin_windows(windows, bins=10)
    assert len(points) >= 5 and [p.load for p in points] == sorted(p.load for p in points)
    assert points_by_model(windows, bins=10) == {MODEL: points}


def test_a_fleet_that_never_saturates_has_no_knee():
    sim = FleetSimulator(SimConfig(nodes=1, sources=("vllm",), start_ts=NINE_UTC, seed=3))
    [analysis] = recommend_from_telemetry(iter_records(sim, 120), source="telemetry:healthy.jsonl")
    rec = analysis.recommendation
    assert rec.ttft_knee is None and rec.tpot_knee is None
    assert rec.safe_request_rate < capacity_rps(1.0, 1.0)
    assert any("ramp further" in n or "plateaus" in n for n in analysis.notes)


def test_too_little_telemetry():
    sim = FleetSimulator(SimConfig(nodes=1, sources=("vllm", "dcgm"), seed=3))
    with pytest.raises(ValueError, match="no engine telemetry"):
        recommend_from_telemetry(iter_records(sim, 1), source="telemetry:short.jsonl")
    with pytest.raises(ValueError, match="window_s"):
        telemetry_windows([], window_s=0)
    with pytest.raises(ValueError, match="bins"):
        bin_windows([], bins=0)
    assert bin_windows([]) == []
