"""Recommendations from hand-built load tests with known knees; the capacity file and the KEDA snippet."""

from __future__ import annotations

import fnmatch
import math

import pytest
import yaml

from tailhound.capacity.model import CapacityRecommendation, LoadTestResult, Percentiles, StepResult, TokenSummary
from tailhound.capacity.recommend import (
    HEADER,
    LoadPoint,
    analyse,
    build_capacity_file,
    keda_snippet,
    literal_pattern,
    points_from_result,
    recommend,
    render_capacity_file,
    write_capacity_file,
)
from tailhound.capacity_file import load_capacity_file

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
#: rate mode: TPOT bends at 8 req/s, TTFT at 10 req/s (capacity): the TPOT knee is the conservative one
TPOT_KNEE, TTFT_KNEE, CAPACITY = 8.0, 10.0, 10.0
#: the mean TPOT is 20 ms x (1 + (rate / 6)^3): its elasticity 3u / (1 + u), u = (rate / 6)^3, reaches the
#: throughput's (1 below capacity) at u = 1/2
OUTPACE = 6.0 * 0.5 ** (1 / 3)
BATCH_PER_RPS = 20.0


def step(
    i: int,
    offered: float,
    *,
    throughput: float,
    ttft_p95: float,
    tpot_p95: float,
    tpot_mean: float,
    engine: dict[str, float] | None = None,
    in_flight: float | None = None,
) -> StepResult:
    return StepResult(
        index=i,
        offered=offered,
        started_at=1_000.0 + 60 * i,
        duration_s=60.0,
        requests=max(1, int(throughput * 60)),
        errors=0,
        throughput_rps=throughput,
        output_tokens_per_s=throughput * 300,
        concurrency_mean=in_flight,
        ttft=Percentiles(p50=ttft_p95 * 0.6, p95=ttft_p95, p99=ttft_p95 * 1.3, mean=ttft_p95 * 0.6, count=100),
        tpot=Percentiles(p50=tpot_mean, p95=tpot_p95, p99=tpot_p95 * 1.2, mean=tpot_mean, count=100),
        engine=engine or {},
    )


def result(steps: list[StepResult], mode: str = "rate", model: str = MODEL) -> LoadTestResult:
    return LoadTestResult(
        target="http://127.0.0.1:8000",
        model=model,
        mode=mode,  # type: ignore[arg-type]
        token_mix=TokenSummary(source="explicit", prompt_mean=1000, prompt_p95=3000, output_mean=300, output_p95=900),
        started_at=1_000.0,
        finished_at=1_000.0 + 60 * len(steps),
        steps=steps,
    )


def rate_test(tpot_bends: bool = True, engine: bool = True) -> LoadTestResult:
    """Offered 1..15 requests/s, one step each; capacity 10 requests/s."""
    steps = []
    for i, rate in enumerate(float(r) for r in range(1, 16)):
        served = min(rate, CAPACITY)
        ttft = 0.25 + 0.01 * rate + max(0.0, rate - TTFT_KNEE) * 3.0  # the queue of each step
        tpot95 = 0.03 + 0.001 * rate + (max(0.0, rate - TPOT_KNEE) * 0.01 if tpot_bends else 0.0)
        tpot_mean = 0.02 * (1.0 + (min(rate, CAPACITY) / 6.0) ** 3)
        queue = 0.0 if rate < 7 else 2.5 if rate <= 9 else 40.0 * (rate - 9)
        figures = {"queue": queue, "batch": BATCH_PER_RPS * served, "kv_cache_usage": 0.1 * served} if engine else {}
        steps.append(
            step(i, rate, throughput=served, ttft_p95=ttft, tpot_p95=tpot95, tpot_mean=tpot_mean, engine=figures)
        )
    return result(steps)


def test_rate_mode_recommendation():
    a = recommend(rate_test(), source="loadtest:result.json")
    rec = a.recommendation
    assert rec.model == MODEL and rec.source == "loadtest:result.json" and rec.load_unit == "requests_per_s"
    assert abs(rec.ttft_knee.load - TTFT_KNEE) / TTFT_KNEE <= 0.1
    assert abs(rec.tpot_knee.load - TPOT_KNEE) / TPOT_KNEE <= 0.1
    # the conservative (lower) knee: TPOT's
    assert rec.safe_request_rate == pytest.approx(rec.tpot_knee.load, rel=1e-3)
    assert any("from the TPOT knee" in n for n in a.notes)
    # knee latencies are the measured curves there
    assert rec.ttft_knee.latency_s == pytest.approx(0.25 + 0.01 * rec.ttft_knee.load, rel=0.05)
    # the plateau: 10 requests/s from 10 offered
    assert rec.throughput_plateau_rps == pytest.approx(CAPACITY) and a.plateau_load == pytest.approx(CAPACITY)
    # TPOT outpaces throughput at ~4.76 requests/s, where the batch is 20 x that
    assert abs(rec.tpot_outpaces_throughput_at - OUTPACE) / OUTPACE <= 0.1
    assert abs(rec.recommended_max_num_seqs - BATCH_PER_RPS * OUTPACE) / (BATCH_PER_RPS * OUTPACE) <= 0.1
    assert any("the engine's running batch" in n for n in a.notes)
    # the engine's queue at the safe load (the step at or below ~8 requests/s)
    assert rec.queue_scale_out == 2.5
    assert rec.keda == {"queue": 2.5, "batch": round(0.8 * rec.recommended_max_num_seqs, 1)}
    assert a.safe_load == rec.safe_request_rate


def test_a_test_that_stopped_early_says_so():
    a = recommend(rate_test().model_copy(update={"stopped": "error rate 12 % > 10 %"}), source="loadtest:x")
    assert a.notes[0] == "the load test stopped early: error rate 12 % > 10 %"


def test_p99_and_a_single_knee():
    a = recommend(rate_test(tpot_bends=False), source="loadtest:x", percentile="p99")
    rec = a.recommendation
    assert a.percentile == "p99" and rec.tpot_knee is None
    assert abs(rec.ttft_knee.load - TTFT_KNEE) / TTFT_KNEE <= 0.1
    assert rec.safe_request_rate == pytest.approx(rec.ttft_knee.load, rel=1e-3)
    assert "no TPOT p99 knee within the tested load" in a.notes
    # P99 knee latency: 1.3 x the P95 curve here
    assert rec.ttft_knee.latency_s == pytest.approx(1.3 * (0.25 + 0.01 * rec.ttft_knee.load), rel=0.05)
    with pytest.raises(ValueError, match="percentile"):
        recommend(rate_test(), source="x", percentile="p90")


def test_without_engine_figures_the_playbook_queue_and_littles_law():
    a = recommend(rate_test(engine=False), source="loadtest:x")
    rec = a.recommendation
    assert rec.queue_scale_out == 2.0 and any("playbook" in n for n in a.notes)
    # Little: throughput x (TTFT mean + TPOT mean x 299) at the outpacing rate
    r = rec.tpot_outpaces_throughput_at
    expect = r * (0.6 * (0.25 + 0.01 * r) + 0.02 * (1 + (r / 6) ** 3) * 299)
    assert abs(rec.recommended_max_num_seqs - expect) / expect <= 0.05
    assert any("Little's law" in n for n in a.notes)


def concurrency_test(engine: bool = True) -> LoadTestResult:
    """Closed loop, 16..400 in flight; the batch is capped at 256 and TPOT = 20 ms + 0.1 ms per running
    sequence, so TTFT bends at 256 in flight and TPOT outpaces throughput at 200 (see test_knees)."""
    steps = []
    cap, prefill, out = 256, 0.1, 300
    for i, n in enumerate(float(16 * k) for k in range(1, 26)):
        batch = min(n, cap)
        tpot = 0.02 + 0.0001 * batch
        served = batch / (prefill + out * tpot)
        ttft = prefill + max(0.0, n - cap) / served
        figures = {"queue": max(0.0, n - cap), "batch": batch} if engine else {}
        steps.append(
            step(
                i,
                n,
                throughput=served,
                ttft_p95=ttft * 1.5,
                tpot_p95=tpot * 1.1,
                tpot_mean=tpot,
                engine=figures,
                in_flight=n,
            )
        )
    return result(steps, mode="concurrency")


def test_concurrency_mode_converts_the_knee_to_requests_per_second():
    a = recommend(concurrency_test(), source="loadtest:c.json")
    rec = a.recommendation
    assert rec.load_unit == "concurrency"
    assert abs(rec.ttft_knee.load - 256) / 256 <= 0.1
    assert rec.tpot_knee is None  # rises, then flat at the batch cap: no upward bend
    served_at_knee = min(rec.ttft_knee.load, 256) / (0.1 + 300 * (0.02 + 0.0001 * min(rec.ttft_knee.load, 256)))
    assert rec.safe_request_rate == pytest.approx(served_at_knee, rel=0.03)
    assert a.safe_load == pytest.approx(rec.ttft_knee.load)
    assert abs(rec.tpot_outpaces_throughput_at - 200) / 200 <= 0.1
    assert abs(rec.recommended_max_num_seqs - 200) / 200 <= 0.1
    # the queue is 0 at and below the knee: floored at one request
    assert rec.queue_scale_out == 1.0 and any("floored" in n for n in a.notes)
    assert rec.throughput_plateau_rps == pytest.approx(256 / (0.1 + 300 * 0.0456), rel=0.06)


def test_concurrency_mode_without_engine_figures_uses_the_client_in_flight():
    a = recommend(concurrency_test(engine=False), source="loadtest:c.json")
    rec = a.recommendation
    assert abs(rec.recommended_max_num_seqs - 200) / 200 <= 0.1
    assert any("the client's requests in flight" in n for n in a.notes)
    assert rec.queue_scale_out == 2.0  # in flight minus batch needs the batch: the playbook's level


def test_in_flight_minus_batch_when_the_engine_queue_is_missing():
    points = [
        LoadPoint(
            load=float(x),
            throughput_rps=float(x),
            ttft=Percentiles(p95=0.3 + max(0, x - 6) * 2.0),
            tpot=Percentiles(p95=0.03, mean=0.03),
            batch=10.0 * x,
            in_flight=10.0 * x + 4.0,
        )
        for x in range(1, 11)
    ]
    a = analyse(points, model="m", source="loadtest:x")
    assert a.recommendation.queue_scale_out == 4.0
    assert any("minus the engine's batch" in n for n in a.notes)


def test_no_knee_reached():
    """Linear latencies, throughput = offered to the end: the test stopped short of saturation."""
    points = [
        LoadPoint(
            load=float(x),
            throughput_rps=float(x),
            ttft=Percentiles(p95=0.3 + 0.01 * x),
            tpot=Percentiles(p95=0.03, mean=0.03),
            batch=10.0 * x,
        )
        for x in range(1, 11)
    ]
    a = analyse(points, model="m", source="loadtest:x")
    rec = a.recommendation
    assert rec.ttft_knee is None and rec.tpot_knee is None and rec.throughput_plateau_rps is None
    assert rec.safe_request_rate == 10.0 and any("ramp further" in n for n in a.notes)
    assert rec.recommended_max_num_seqs == 100  # the batch at the safe load (TPOT never outpaced)


def test_no_knee_but_a_plateau():
    points = [
        LoadPoint(
            load=float(x),
            throughput_rps=min(float(x), 7.0),
            ttft=Percentiles(p95=0.3),
            tpot=Percentiles(p95=0.03, mean=0.03),
            batch=10.0 * min(x, 7),
        )
        for x in range(1, 11)
    ]
    rec = analyse(points, model="m", source="loadtest:x").recommendation
    assert rec.safe_request_rate == 7.0 and rec.throughput_plateau_rps == 7.0


def test_nothing_to_analyse():
    with pytest.raises(ValueError, match="no load point"):
        analyse([], model="m", source="x")
    with pytest.raises(ValueError, match="no load point"):
        recommend(result([]), source="x")
    idle = step(0, 1.0, throughput=0.0, ttft_p95=1, tpot_p95=1, tpot_mean=1).model_copy(update={"requests": 0})
    assert points_from_result(result([idle])) == []  # a step that completed nothing is no point


def test_capacity_file_round_trip(tmp_path):
    rate = recommend(rate_test(), source="loadtest:a.json").recommendation
    other = recommend(concurrency_test(), source="loadtest:b.json").recommendation.model_copy(
        update={"model": "Qwen/Qwen2.5-7B[fp8]"}
    )
    cf = build_capacity_file([rate, other], generated_at=1_767_225_600.0)
    assert cf.source == "loadtest:a.json, loadtest:b.json"
    pattern = literal_pattern("Qwen/Qwen2.5-7B[fp8]")
    assert list(cf.models) == [MODEL, pattern]
    assert fnmatch.fnmatchcase("Qwen/Qwen2.5-7B[fp8]", pattern) and not fnmatch.fnmatchcase("Qwen/Qwen2.5-7Bf", pattern)
    t = cf.models[MODEL]
    assert (t.safe_request_rate, t.queue_scale_out, t.max_num_seqs) == (
        rate.safe_request_rate,
        rate.queue_scale_out,
        rate.recommended_max_num_seqs,
    )
    assert t.ttft_knee_s == rate.ttft_knee.latency_s and t.tpot_knee_s == rate.tpot_knee.latency_s
    assert cf.models[pattern].tpot_knee_s is None

    path = tmp_path / "out" / "capacity.yaml"
    loaded = write_capacity_file(cf, path)
    assert loaded == cf == load_capacity_file(path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith(HEADER.splitlines()[0].split("{")[0]) and "capacity.safe_request_rate" in text
    assert yaml.safe_load(text)["models"][MODEL]["max_num_seqs"] == rate.recommended_max_num_seqs
    assert cf.limits()["capacity.safe_request_rate"][MODEL] == rate.safe_request_rate
    assert render_capacity_file(cf) == text


def test_capacity_file_pattern_and_errors():
    rec = recommend(rate_test(), source="loadtest:a.json").recommendation
    cf = build_capacity_file([rec], model_pattern="meta-llama/*")
    assert list(cf.models) == ["meta-llama/*"] and cf.generated_at > 0
    with pytest.raises(ValueError, match="names one model"):
        build_capacity_file([rec, rec.model_copy(update={"model": "b"})], model_pattern="*")
    with pytest.raises(ValueError, match="two recommendations"):
        build_capacity_file([rec, rec])
    with pytest.raises(ValueError, match="no recommendation"):
        build_capacity_file([])


def test_keda_snippet_pastes_into_the_scaled_object():
    rec = CapacityRecommendation(
        model=MODEL,
        source="loadtest:a.json",
        safe_request_rate=8.0,
        recommended_max_num_seqs=96,
        queue_scale_out=2.5,
        keda={"queue": 2.5, "batch": 76.8},
    )
    snippet = keda_snippet(rec)
    triggers = yaml.safe_load(snippet)["triggers"]
    assert [(t["name"], t["metricType"], t["metadata"]["threshold"]) for t in triggers] == [
        ("queue", "AverageValue", "2.5"),
        ("batch", "AverageValue", "76.8"),
    ]
    assert "max_num_seqs 96" in snippet
    assert not math.isnan(float(triggers[1]["metadata"]["threshold"]))
