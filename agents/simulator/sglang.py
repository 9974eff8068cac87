"""The simulated engine exported as SGLang (``kind="sglang"``): SGLang's metric names, default buckets and labels.

Names, types and bucket bounds follow sgl-project/sglang @ 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538
``python/sglang/srt/metrics/collector.py`` (the same as ``tests/agents/fixtures/sglang.prom``). Its tokenizer
process labels request metrics with ``model_name`` and ``engine_type``; the scheduler adds its ranks
(``tp_rank``, ``pp_rank``, ``moe_ep_rank``; only attention-TP rank 0 reports). Neither names an engine, so the
scraped instance (``<node>:30000``, SGLang's default port) is the engine. There is no per-request TPOT
histogram: ``sglang:inter_token_latency_seconds`` counts one observation per generated token after the first,
and ``sglang:num_retracted_requests_total`` counts decode requests pushed back when the KV pool runs out (its
preemptions). Served with ``--enable-metrics --collect-tokens-histogram``.
"""

from __future__ import annotations

from typing import Any

from tailhound.snapshot import CounterSample, GaugeSample, Sample

from .histogram import CumulativeHistogram

SGLANG_PORT = 30000
#: TokenizerMetricsCollector's default bounds.
TTFT_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
)  # fmt: skip
E2E_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
    600.0, 1200.0, 1800.0, 2400.0,
)  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
    0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
TOKEN_BUCKETS: tuple[float, ...] = (
    100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0,
    9000.0, 10000.0, 12000.0, 15000.0, 20000.0, 22000.0, 25000.0, 30000.0, 35000.0, 40000.0, 66000.0,
    99000.0, 132000.0, 300000.0, 600000.0, 900000.0, 1100000.0,
)  # fmt: skip
#: SchedulerMetricsCollector's sglang:queue_time_seconds bounds.
QUEUE_BUCKETS: tuple[float, ...] = (
    0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0,
    100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0,
    2000.0, 2500.0, 3000.0,
)  # fmt: skip
#: The scheduler's ranks of a single-node tensor-parallel engine (rank 0 reports).
SCHEDULER_RANKS = {"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}


def sglang_histograms() -> dict[str, CumulativeHistogram]:
    """The engine's request histograms under SGLang's names (keys as the engine records them; no "tpot")."""
    return {
        "ttft": CumulativeHistogram("sglang:time_to_first_token_seconds", TTFT_BUCKETS),
        "itl": CumulativeHistogram("sglang:inter_token_latency_seconds", ITL_BUCKETS),
        "e2e": CumulativeHistogram("sglang:e2e_request_latency_seconds", E2E_BUCKETS),
        "queue": CumulativeHistogram("sglang:queue_time_seconds", QUEUE_BUCKETS),
        "prompt": CumulativeHistogram("sglang:prompt_tokens_histogram", TOKEN_BUCKETS),
        "gen": CumulativeHistogram("sglang:generation_tokens_histogram", TOKEN_BUCKETS),
    }


def sglang_samples(
    engine: Any, hist: dict[str, CumulativeHistogram], model: str, kv_capacity_tokens: int
) -> list[Sample]:
    """The engine's metrics as an SGLang server exposes them (tokenizer and scheduler label sets); `engine` is an
    ``engine.Engine`` (not imported: engine.py imports this module)."""
    tok = {"model_name": model, "engine_type": "unified"}
    sch = {**tok, **SCHEDULER_RANKS}
    last = engine.last
    g, c = GaugeSample, CounterSample
    finished = engine.success["stop"] + engine.success["length"]
    out: list[Sample] = [
        c(name="sglang:prompt_tokens_total", labels=tok, value=float(engine.prompt_tokens)),
        c(name="sglang:generation_tokens_total", labels=tok, value=float(engine.generation_tokens)),
        c(name="sglang:cached_tokens_total", labels=tok, value=float(engine.prefix_hits)),
        c(name="sglang:num_requests_total", labels=tok, value=float(finished)),
        c(name="sglang:num_aborted_requests_total", labels=tok, value=float(engine.success["abort"])),
        g(name="sglang:num_running_reqs", labels=sch, value=float(last.running)),
        g(name="sglang:num_used_tokens", labels=sch, value=float(int(last.kv_usage * kv_capacity_tokens))),
        g(name="sglang:token_usage", labels=sch, value=round(last.kv_usage, 5)),
        g(name="sglang:gen_throughput", labels=sch, value=round(last.generation_tps, 3)),
        g(name="sglang:num_queue_reqs", labels=sch, value=float(last.waiting)),
        g(name="sglang:max_total_num_tokens", labels=sch, value=float(kv_capacity_tokens)),
        c(name="sglang:num_retracted_requests_total", labels=sch, value=float(engine.preemptions)),
    ]
    out.extend(h.sample(sch if key == "queue" else tok) for key, h in hist.items())
    return out
