"""The simulated engine exported as Hugging Face TGI (``kind="tgi"``): TGI's names, bucket bounds and shapes.

tgi_request_* histograms in seconds, per-forward-pass tgi_batch_*_duration{method}, tgi_queue_size,
tgi_batch_current_size and the token budget, counters without a ``_total`` suffix, no TTFT, no KV-cache gauge,
no labels but ``method`` and ``err`` (tests/agents/fixtures/tgi.prom and tgi_v3.prom). The router admits at most
:data:`TGI_MAX_CONCURRENT_REQUESTS` requests (queued + running) and answers the rest 429 ("overloaded").
"""

from __future__ import annotations

from typing import Any

from tailhound.snapshot import CounterSample, GaugeSample, Sample

from .engine_params import DEFAULT_MAX_TOKENS, MAX_MODEL_LEN, PREFILL_OVERHEAD_S, PREFILL_TOKENS_PER_S, SHORT_MAX_TOKENS
from .histogram import TGI_DURATION_BUCKETS, CumulativeHistogram, tgi_linear_buckets

#: TGI launcher settings of the simulated TGI fleet (--max-concurrent-requests raised from its default 128
#: to hold a 256-sequence batch plus a queue; --max-input-tokens / --max-total-tokens as vLLM's context).
TGI_MAX_CONCURRENT_REQUESTS = 512
#: TGI's token budget (tgi_batch_max_total_tokens, sized by the launcher from the memory left after the weights:
#: ~1M tokens of KV for a 70B bf16 model on 8 x 80 GB) and the prefill batches it runs per second at most.
TGI_MAX_BATCH_TOTAL_TOKENS = 1_000_000
TGI_PREFILLS_PER_S = 4.0
MEAN_MAX_NEW_TOKENS = 0.1 * SHORT_MAX_TOKENS + 0.9 * DEFAULT_MAX_TOKENS
TGI_METHODS = ("decode", "prefill")
TGI_MAX_INPUT_TOKENS = MAX_MODEL_LEN - DEFAULT_MAX_TOKENS
TGI_MAX_TOTAL_TOKENS = MAX_MODEL_LEN
TGI_PORT = 3000


def tgi_histograms() -> dict[str, CumulativeHistogram]:
    """TGI's per-request histograms, by the engine's role for them."""
    return {
        "queue": CumulativeHistogram("tgi_request_queue_duration", TGI_DURATION_BUCKETS),
        "tpot": CumulativeHistogram("tgi_request_mean_time_per_token_duration", TGI_DURATION_BUCKETS),
        "e2e": CumulativeHistogram("tgi_request_duration", TGI_DURATION_BUCKETS),
        "validation": CumulativeHistogram("tgi_request_validation_duration", TGI_DURATION_BUCKETS),
        "inference": CumulativeHistogram("tgi_request_inference_duration", TGI_DURATION_BUCKETS),
        "prompt": CumulativeHistogram("tgi_request_input_length", tgi_linear_buckets(TGI_MAX_INPUT_TOKENS)),
        "gen": CumulativeHistogram("tgi_request_generated_tokens", tgi_linear_buckets(TGI_MAX_TOTAL_TOKENS)),
        "max_new": CumulativeHistogram("tgi_request_max_new_tokens", tgi_linear_buckets(TGI_MAX_TOTAL_TOKENS)),
    }


def tgi_batch_histograms() -> dict[tuple[str, str], CumulativeHistogram]:
    """backends/v3: one observation per forward pass of the batch, by (name, method)."""
    return {
        (name, m): CumulativeHistogram(name, TGI_DURATION_BUCKETS)
        for m in TGI_METHODS
        for name in ("tgi_batch_forward_duration", "tgi_batch_inference_duration")
    }


def observe_tgi_batches(
    h: dict[tuple[str, str], CumulativeHistogram],
    dt: float,
    served: int,
    itl: float,
    s_pre: float,
    mean_prompt: float,
    running_f: float,
) -> tuple[int, int, float]:
    """TGI's per-forward-pass histograms of one tick: a decode pass per ITL while the batch runs, the tick's
    new requests prefilled in at most TGI_PREFILLS_PER_S batches (forward = the model call, inference = forward
    plus the router's bookkeeping). Returns (decode passes, prefill passes, tokens the batch has reserved)."""
    steps = int(dt / itl) if running_f >= 1.0 else 0
    if steps:
        for name, share in (("tgi_batch_forward_duration", 0.93), ("tgi_batch_inference_duration", 1.0)):
            h[(name, "decode")].observe_lognormal_mix(steps, steps * itl * share, ((1.0, itl * share, 0.08),))
    prefills = min(served, int(dt * TGI_PREFILLS_PER_S))
    if prefills:
        each = s_pre * (PREFILL_OVERHEAD_S + served / prefills * mean_prompt / PREFILL_TOKENS_PER_S)
        for name, share in (("tgi_batch_forward_duration", 0.95), ("tgi_batch_inference_duration", 1.0)):
            h[(name, "prefill")].observe_lognormal_mix(prefills, prefills * each * share, ((1.0, each * share, 0.3),))
    return steps, prefills, min(TGI_MAX_BATCH_TOTAL_TOKENS, running_f * (mean_prompt + MEAN_MAX_NEW_TOKENS))


def observe_tgi_requests(
    h: dict[str, CumulativeHistogram],
    prompts: list[int],
    gens: list[int],
    queues: list[float],
    e2es: list[float],
    limits: list[int],
) -> None:
    """TGI's per-request histograms (router/src/server.rs): inference = prefill + decode, time per token =
    inference / generated tokens, duration = validation (tokenisation) + queue + inference."""
    inference = [e - q for e, q in zip(e2es, queues, strict=True)]
    validation = [0.0008 + p * 4e-7 for p in prompts]
    h["inference"].observe_many(inference)
    h["tpot"].observe_many(i / g for i, g in zip(inference, gens, strict=True))
    h["validation"].observe_many(validation)
    h["e2e"].observe_many(v + e for v, e in zip(validation, e2es, strict=True))
    h["max_new"].observe_many(limits)


def tgi_samples(
    engine: Any, hist: dict[str, CumulativeHistogram], batch_hist: dict[tuple[str, str], CumulativeHistogram]
) -> list[Sample]:
    """TGI's metrics of `engine`: counters, gauges, histograms, as metrics-exporter-prometheus renders them."""
    last = engine.last
    g, c = GaugeSample, CounterSample
    out: list[Sample] = []
    for name in ("tgi_batch_inference_count", "tgi_batch_inference_success"):
        out.extend(c(name=name, labels={"method": m}, value=float(engine.batch_calls[m])) for m in TGI_METHODS)
    out.append(c(name="tgi_request_count", value=float(engine.received)))
    for err in sorted(engine.failures):  # metrics-rs registers a label set on its first increment
        out.append(c(name="tgi_request_failure", labels={"err": err}, value=float(engine.failures[err])))
    out += [
        c(name="tgi_request_success", value=float(engine.success["stop"] + engine.success["length"])),
        g(name="tgi_batch_current_max_tokens", value=float(int(engine.reserved_tokens) if last.running else 0)),
        g(name="tgi_batch_current_size", value=float(last.running)),
        g(name="tgi_batch_max_total_tokens", value=float(TGI_MAX_BATCH_TOTAL_TOKENS)),
        g(name="tgi_queue_size", value=float(last.waiting)),
    ]
    out.extend(h.sample({"method": m}) for (_name, m), h in batch_hist.items())
    out.extend(h.sample({}) for h in hist.values())
    return out
