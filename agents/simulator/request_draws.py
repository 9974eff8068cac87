"""The requests a simulated engine finished in a tick, drawn one by one from the request mix.

Prompt and output lengths (the built-in log-normal mix, or a load trace's tokens), queue time, prefill and
mean time per output token of each request, under the tick's faults (long prompts, long generations, scaled
lengths). Only draws: the engine records what is drawn into its counters and histograms.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .engine_params import (
    DEFAULT_MAX_TOKENS,
    GEN_MEDIAN,
    GEN_SIGMA,
    LONG_GEN_MEDIAN,
    LONG_GEN_SIGMA,
    LONG_PROMPT_MEDIAN,
    LONG_PROMPT_SCALE,
    LONG_PROMPT_SIGMA,
    MAX_MODEL_LEN,
    MAX_NUM_SEQS,
    NORMAL_QUANTILES,
    NORMAL_QUANTILES_N,
    PREFILL_OVERHEAD_S,
    PREFILL_TOKENS_PER_S,
    PROMPT_MEDIAN,
    PROMPT_SIGMA,
    SHORT_MAX_TOKENS,
)
from .faults import NodeEffects


@dataclass
class Finished:
    """The requests of one tick: per-request tokens and seconds (`limits`: max_tokens, TGI only), how they ended."""

    prompts: list[int]
    gens: list[int]
    queues: list[float]
    ttfts: list[float]
    e2es: list[float]
    tpots: list[float]  # requests with more than one output token
    limits: list[int]
    n_stop: int
    n_length: int
    decode_total: float


def draw_finished(
    rng: random.Random, served: int, itl: float, s_pre: float, running_f: float, util: float,
    effects: NodeEffects, stall: float, long_prefill_s: float, wait_start: float, wait_end: float,
    tgi: bool, requests: list[tuple[int, int]] | None = None,
) -> Finished:  # fmt: skip
    """The `served` requests that finished this tick (`requests`: their trace tokens; a trace's output lengths
    are what the model generated, so only the context limit truncates them); `stall`: the share of the tick the
    decode loop waited for unchunked long prefills of `long_prefill_s` each."""
    random_, exp, log, z, zn = rng.random, math.exp, math.log, NORMAL_QUANTILES, NORMAL_QUANTILES_N
    ln_prompt = math.log(PROMPT_MEDIAN * effects.prompt_scale)
    ln_gen = math.log(GEN_MEDIAN * effects.gen_scale)
    long_prompts = effects.long_prompt_share
    ln_long_prompt = math.log(LONG_PROMPT_MEDIAN)
    prompt_cap = MAX_MODEL_LEN - DEFAULT_MAX_TOKENS
    sched_mean = 0.003 * (1.0 + 10.0 * util**3)
    interference = 1.0 + 0.3 * running_f / MAX_NUM_SEQS
    ttfts: list[float] = []
    tpots: list[float] = []
    e2es: list[float] = []
    queues: list[float] = []
    prompts: list[int] = []
    gens: list[int] = []
    n_stop = n_length = 0
    decode_total = 0.0
    long_share = effects.long_gen_share
    ln_long = math.log(LONG_GEN_MEDIAN)
    limits: list[int] = []
    prompt_scale, gen_scale = effects.prompt_scale, effects.gen_scale
    for k in range(served):
        if requests is not None:
            p, g = requests[k]
            p = min(prompt_cap, max(1, int(p * prompt_scale)))
            g = max(1, int(g * gen_scale)) if gen_scale != 1.0 else g
            limit = DEFAULT_MAX_TOKENS
        else:
            p = min(prompt_cap, max(16, int(exp(ln_prompt + PROMPT_SIGMA * z[int(random_() * zn)]))))
        if long_prompts and random_() < long_prompts:
            p = min(prompt_cap, int(exp(ln_long_prompt + LONG_PROMPT_SIGMA * z[int(random_() * zn)])))
        if long_share and random_() < long_share:  # (no draw at all without long generations)
            p = max(16, int(p * LONG_PROMPT_SCALE))
            limit = DEFAULT_MAX_TOKENS
            g = 1 + int(exp(ln_long + LONG_GEN_SIGMA * z[int(random_() * zn)]))
        elif requests is None:
            limit = SHORT_MAX_TOKENS if random_() < 0.1 else DEFAULT_MAX_TOKENS
            g = 1 + int(exp(ln_gen + GEN_SIGMA * z[int(random_() * zn)]))
        if tgi:
            limits.append(limit)
        if g >= limit:
            g, n_length = limit, n_length + 1
        else:
            n_stop += 1
        q = -sched_mean * log(1.0 - random_())
        if stall and random_() < stall:  # scheduled while a long prompt was prefilled: waits for its end
            q += long_prefill_s * random_()
        if wait_start > 0 or wait_end > 0:
            q += wait_start + (wait_end - wait_start) * random_()
        ttft = q + s_pre * (PREFILL_OVERHEAD_S + p / PREFILL_TOKENS_PER_S) * interference
        tpot = itl * exp(0.06 * z[int(random_() * zn)])
        decode = (g - 1) * tpot
        decode_total += decode
        prompts.append(p)
        gens.append(g)
        queues.append(q)
        ttfts.append(ttft)
        e2es.append(ttft + decode)
        if g > 1:
            tpots.append(tpot)
    return Finished(prompts, gens, queues, ttfts, e2es, tpots, limits, n_stop, n_length, decode_total)
