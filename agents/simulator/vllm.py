"""The simulated engine exported as vLLM V1: its metric names, bucket bounds and labels (``model_name``, ``engine``).

The default export; with ``http_metrics`` the API server's ``http_requests_total`` counters as
prometheus_fastapi_instrumentator labels them, one label set from its first request on.
"""

from __future__ import annotations

from typing import Any

from tailhound.snapshot import CounterSample, GaugeSample, Sample

from .engine_params import FINISHED_REASONS, HTTP_STATUSES, MAX_MODEL_LEN
from .histogram import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, CumulativeHistogram, build_1_2_5_buckets

#: The OpenAI-compatible route every simulated request uses.
HTTP_HANDLER = "/v1/chat/completions"


def vllm_histograms() -> dict[str, CumulativeHistogram]:
    """vLLM's per-request histograms, by the engine's role for them."""
    return {
        "ttft": CumulativeHistogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
        "itl": CumulativeHistogram("vllm:inter_token_latency_seconds", ITL_BUCKETS),
        "tpot": CumulativeHistogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS),
        "e2e": CumulativeHistogram("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
        "queue": CumulativeHistogram("vllm:request_queue_time_seconds", REQUEST_LATENCY_BUCKETS),
        "prompt": CumulativeHistogram("vllm:request_prompt_tokens", build_1_2_5_buckets(MAX_MODEL_LEN)),
        "gen": CumulativeHistogram("vllm:request_generation_tokens", build_1_2_5_buckets(MAX_MODEL_LEN)),
    }


def vllm_samples(engine: Any, hist: dict[str, CumulativeHistogram]) -> list[Sample]:
    """`engine`'s metrics as vLLM's server exposes them."""
    lb = engine.labels
    last = engine.last
    out: list[Sample] = [
        GaugeSample(name="vllm:num_requests_running", labels=lb, value=float(last.running)),
        GaugeSample(name="vllm:num_requests_waiting", labels=lb, value=float(last.waiting)),
        GaugeSample(name="vllm:kv_cache_usage_perc", labels=lb, value=round(last.kv_usage, 5)),
        CounterSample(name="vllm:prompt_tokens_total", labels=lb, value=float(engine.prompt_tokens)),
        CounterSample(name="vllm:generation_tokens_total", labels=lb, value=float(engine.generation_tokens)),
        CounterSample(name="vllm:num_preemptions_total", labels=lb, value=float(engine.preemptions)),
        CounterSample(name="vllm:prefix_cache_queries_total", labels=lb, value=float(engine.prefix_queries)),
        CounterSample(name="vllm:prefix_cache_hits_total", labels=lb, value=float(engine.prefix_hits)),
    ]
    for reason in FINISHED_REASONS:
        out.append(
            CounterSample(
                name="vllm:request_success_total",
                labels={**lb, "finished_reason": reason},
                value=float(engine.success[reason]),
            )
        )
    out.extend(h.sample(lb) for h in hist.values())
    if engine.http_metrics:
        for status in HTTP_STATUSES:  # a label set appears with its first request, as in prometheus_client
            if engine.http[status]:
                out.append(
                    CounterSample(
                        name="http_requests_total",
                        value=float(engine.http[status]),
                        labels={"handler": HTTP_HANDLER, "method": "POST", "status": status},
                    )
                )
    return out
