"""The simulated engine's parameters and the capacity they give: limits, step-time model, request mix, faults.

One place for the numbers the engine's tick (:mod:`.engine`) and the capacity tests both read, and for the
closed-form capacity of a mix (:func:`mix_capacity_rps`) that a load trace's rate is scaled against.
"""

from __future__ import annotations

import math
from statistics import NormalDist

MAX_NUM_SEQS = 256
MAX_MODEL_LEN = 32768
KV_CAPACITY_TOKENS = 600_000
#: Decode step time = slowdown * (BASE + PER_SEQ * running + PER_KV_TOKEN * tokens in the KV cache).
ITL_BASE_S = 0.018
ITL_PER_SEQ_S = 0.00012
ITL_PER_KV_TOKEN_S = 2.5e-8
PREFILL_OVERHEAD_S = 0.02
PREFILL_TOKENS_PER_S = 20_000.0
#: Request mix: log-normal prompt and output lengths (medians, sigmas).
PROMPT_MEDIAN, PROMPT_SIGMA = 1000.0, 0.9
GEN_MEDIAN, GEN_SIGMA = 250.0, 0.8
MEAN_PROMPT = PROMPT_MEDIAN * math.exp(PROMPT_SIGMA**2 / 2)
MEAN_GEN = GEN_MEDIAN * math.exp(GEN_SIGMA**2 / 2)
SHORT_MAX_TOKENS, DEFAULT_MAX_TOKENS = 256, 2048
#: Clients give up on requests that would wait longer than this in the queue.
CLIENT_TIMEOUT_S = 300.0

FINISHED_REASONS = ("stop", "length", "abort")

#: Long generations of a head-of-line-blocking tenant: log-normal output lengths (median, sigma), prompts
#: this much shorter than the usual mix ("write a long ..."), and the most requests its closed-loop client
#: keeps waiting (it sends a new request when one finishes).
LONG_GEN_MEDIAN, LONG_GEN_SIGMA = 1800.0, 0.5
LONG_PROMPT_SCALE = 0.5
HOL_MAX_WAITING = 40
#: Long prompts of a long-prompt head-of-line fault (faults.LONG_PROMPT_SHARE of the requests): log-normal
#: prompt lengths (median, sigma). Without chunked prefill one such prefill is one engine step: every running
#: request's next token and every queued request wait for it.
LONG_PROMPT_MEDIAN, LONG_PROMPT_SIGMA = 11000.0, 0.25
LONG_PROMPT_MEAN = LONG_PROMPT_MEDIAN * math.exp(LONG_PROMPT_SIGMA**2 / 2)

#: Retry storm (faults.STORM_*): the API server admits requests while the queue holds less than this many
#: seconds of work and answers the rest 429 (STORM_503_SHARE of them 503, from the proxy); clients retry a
#: rejected request STORM_RETRIES times at once, and re-send requests that waited longer than their
#: timeout (STORM_RESEND of them; the engine still serves the abandoned ones).
STORM_QUEUE_LIMIT_S = 15.0
STORM_CLIENT_TIMEOUT_S = 10.0
STORM_RETRIES = 3
STORM_RESEND = 0.8
STORM_503_SHARE = 0.2
#: Requests rejected outside a storm (invalid or too long, and the odd internal error), per request.
BAD_REQUEST_RATIO = 0.002
SERVER_ERROR_RATIO = 0.0002
#: Status classes of the HTTP counters (prometheus_fastapi_instrumentator).
HTTP_STATUSES = ("2xx", "4xx", "5xx")

#: Standard-normal quantiles: ``NORMAL_QUANTILES[int(random() * NORMAL_QUANTILES_N)]`` is a (finely quantised)
#: normal draw at a fraction of the cost of ``random.gauss``; hundreds of requests a tick need several draws each.
NORMAL_QUANTILES_N = 4096
NORMAL_QUANTILES = tuple(NormalDist().inv_cdf((i + 0.5) / NORMAL_QUANTILES_N) for i in range(NORMAL_QUANTILES_N))


def capped_lognormal_mean(median: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for a log-normal X."""
    mu, nd = math.log(median), NormalDist()
    lc = math.log(cap)
    return math.exp(mu + sigma**2 / 2) * nd.cdf((lc - mu - sigma**2) / sigma) + cap * (1.0 - nd.cdf((lc - mu) / sigma))


def mixed_mean_gen(long_share: float) -> float:
    """Mean output length when `long_share` of the requests are long generations (capped at max_tokens)."""
    normal = 0.1 * capped_lognormal_mean(GEN_MEDIAN, GEN_SIGMA, SHORT_MAX_TOKENS) + 0.9 * capped_lognormal_mean(
        GEN_MEDIAN, GEN_SIGMA, DEFAULT_MAX_TOKENS
    )
    long = capped_lognormal_mean(LONG_GEN_MEDIAN, LONG_GEN_SIGMA, DEFAULT_MAX_TOKENS)
    return (1.0 - long_share) * normal + long_share * long


def engine_capacity(
    mean_prompt: float, mean_gen: float, s_dec: float, s_pre: float
) -> tuple[float, float, float, float, float, float]:
    """(capacity in requests/s, batch cap, KV-bound batch, mean KV tokens a request holds, per-sequence step
    cost, mean prefill time) of an engine serving a mix with these mean lengths at these slowdowns."""
    ctx = mean_prompt + mean_gen / 2  # mean tokens a running request holds in the KV cache
    c_eff = ITL_PER_SEQ_S + ITL_PER_KV_TOKEN_S * ctx
    prefill_mean = s_pre * (PREFILL_OVERHEAD_S + mean_prompt / PREFILL_TOKENS_PER_S)
    kv_limit = 0.97 * KV_CAPACITY_TOKENS / ctx
    b_cap = min(float(MAX_NUM_SEQS), kv_limit)
    capacity_rps = b_cap / (prefill_mean + mean_gen * s_dec * (ITL_BASE_S + c_eff * b_cap))
    return capacity_rps, b_cap, kv_limit, ctx, c_eff, prefill_mean


def mix_capacity_rps(mean_prompt: float, mean_gen: float) -> float:
    """Requests/s one healthy engine completes at saturation for a mix with these mean lengths (the
    simulator's own model: what a trace's rate is scaled against)."""
    mean_prompt = min(mean_prompt, MAX_MODEL_LEN / 2)
    return engine_capacity(mean_prompt, min(mean_gen, float(DEFAULT_MAX_TOKENS)), 1.0, 1.0)[0]
