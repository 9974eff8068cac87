"""A vLLM-like engine (one per node, tensor-parallel over its GPUs) as a per-tick fluid queue.

Each tick: arrivals join the waiting queue; the engine completes as many requests as its current
capacity allows (capacity falls with decode/prefill slowdowns and with KV-cache limits); the
requests completed in the tick are drawn one by one (prompt and output lengths, queue time,
prefill, mean TPOT) and recorded into counters and cumulative histograms with vLLM's names and
bucket bounds. Per-token inter-token latencies are spread over the buckets analytically.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

from tailhound.snapshot import CounterSample, GaugeSample, Sample

from .faults import NodeEffects
from .histogram import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    CumulativeHistogram,
    build_1_2_5_buckets,
)
from .load import poisson

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

#: Standard-normal quantiles: ``_Z[int(random() * _Z_N)]`` is a (finely quantised) normal draw at a
#: fraction of the cost of ``random.gauss``; hundreds of requests a tick need several draws each.
_Z_N = 4096
_Z = tuple(NormalDist().inv_cdf((i + 0.5) / _Z_N) for i in range(_Z_N))


@dataclass(frozen=True)
class EngineTick:
    """What the other models need to know about the engine's last tick."""

    utilization: float  # 0..1, fraction of the engine's current capacity in use
    running: int
    waiting: int
    kv_usage: float
    completed_rps: float
    prompt_tps: float
    generation_tps: float
    itl_s: float


class Engine:
    """vLLM V1-like engine state: queue, counters and histograms of one node."""

    def __init__(self, rng: random.Random, model: str) -> None:
        self._rng = rng
        self.labels = {"model_name": model, "engine": "0"}
        self.waiting = 0
        self._carry = 0.0
        self.last = EngineTick(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, ITL_BASE_S)
        self._hist = {
            "ttft": CumulativeHistogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
            "itl": CumulativeHistogram("vllm:inter_token_latency_seconds", ITL_BUCKETS),
            "tpot": CumulativeHistogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS),
            "e2e": CumulativeHistogram("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
            "queue": CumulativeHistogram("vllm:request_queue_time_seconds", REQUEST_LATENCY_BUCKETS),
            "prompt": CumulativeHistogram("vllm:request_prompt_tokens", build_1_2_5_buckets(MAX_MODEL_LEN)),
            "gen": CumulativeHistogram("vllm:request_generation_tokens", build_1_2_5_buckets(MAX_MODEL_LEN)),
        }
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.success = dict.fromkeys(FINISHED_REASONS, 0)

    def restart(self) -> None:
        """The engine process restarted: counters, histograms and queues start from zero."""
        self._reset_counters()
        for h in self._hist.values():
            h.reset()
        self.waiting = 0
        self._carry = 0.0
        self.last = EngineTick(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, ITL_BASE_S)

    def step(self, dt: float, arrivals: int, effects: NodeEffects, clock_slowdown: float) -> EngineTick:
        """Advance one tick of `dt` seconds with `arrivals` new requests."""
        if effects.engine_restart:
            self.restart()  # requests arriving while the engine restarts are refused
            return self.last
        rng = self._rng
        s_dec = effects.decode_slowdown * clock_slowdown
        s_pre = effects.prefill_slowdown * clock_slowdown
        mean_prompt = min(MEAN_PROMPT * effects.prompt_scale, MAX_MODEL_LEN / 2)
        ctx = mean_prompt + MEAN_GEN / 2  # mean tokens a running request holds in the KV cache
        c_eff = ITL_PER_SEQ_S + ITL_PER_KV_TOKEN_S * ctx
        prefill_mean = s_pre * (PREFILL_OVERHEAD_S + mean_prompt / PREFILL_TOKENS_PER_S)
        kv_limit = 0.97 * KV_CAPACITY_TOKENS / ctx
        b_cap = min(float(MAX_NUM_SEQS), kv_limit)
        capacity_rps = b_cap / (prefill_mean + MEAN_GEN * s_dec * (ITL_BASE_S + c_eff * b_cap))

        # Fluid queue: serve up to capacity, keep the rest waiting, let clients time out.
        waiting_before = self.waiting
        backlog = self.waiting + arrivals
        capacity = capacity_rps * dt + self._carry
        if backlog >= capacity:
            served = int(capacity)
            self._carry = capacity - served
        else:
            served, self._carry = backlog, 0.0
        waiting = backlog - served
        max_waiting = int(capacity_rps * CLIENT_TIMEOUT_S)
        aborted = max(0, waiting - max_waiting)
        waiting -= aborted
        self.waiting = waiting
        rate = served / dt

        # Running batch: Little's law on the decode loop, saturated while requests wait.
        denom = 1.0 - rate * MEAN_GEN * s_dec * c_eff
        if waiting > 0 or denom <= 0.02:
            running_f = b_cap
        else:
            running_f = min(b_cap, rate * (prefill_mean + MEAN_GEN * s_dec * ITL_BASE_S) / denom)
        itl = s_dec * (ITL_BASE_S + c_eff * running_f)
        kv_bound = waiting > 0 and kv_limit <= MAX_NUM_SEQS
        if kv_bound:
            kv_usage = rng.uniform(0.95, 0.99)
        else:
            kv_usage = min(0.99, running_f * ctx / KV_CAPACITY_TOKENS * rng.uniform(0.97, 1.03))
        running = max(0, int(round(running_f * rng.uniform(0.95, 1.05)))) if served else 0
        if kv_usage > 0.9:
            self.preemptions += poisson(rng, (kv_usage - 0.9) * running * 0.4 * dt)

        util = 1.0 if waiting > 0 else min(1.0, rate / capacity_rps)
        prompt_sum, gen_sum = self._complete(
            served, itl, s_pre, running_f, util, effects, dt, waiting_before / capacity_rps, waiting / capacity_rps
        )
        self.success["abort"] += aborted
        self.last = EngineTick(
            utilization=util,
            running=running,
            waiting=waiting,
            kv_usage=kv_usage,
            completed_rps=rate,
            prompt_tps=prompt_sum / dt,
            generation_tps=gen_sum / dt,
            itl_s=itl,
        )
        return self.last

    def _complete(
        self, served: int, itl: float, s_pre: float, running_f: float, util: float,
        effects: NodeEffects, dt: float, wait_start: float, wait_end: float,
    ) -> tuple[int, int]:  # fmt: skip
        """Draw the `served` requests that finished this tick and record them."""
        rng = self._rng
        random_, exp, log, z, zn = rng.random, math.exp, math.log, _Z, _Z_N
        ln_prompt = math.log(PROMPT_MEDIAN * effects.prompt_scale)
        ln_gen = math.log(GEN_MEDIAN)
        prompt_cap = MAX_MODEL_LEN - DEFAULT_MAX_TOKENS
        sched_mean = 0.003 * (1.0 + 10.0 * util**3)
        interference = 1.0 + 0.3 * running_f / MAX_NUM_SEQS
        h = self._hist
        ttfts: list[float] = []
        tpots: list[float] = []
        e2es: list[float] = []
        queues: list[float] = []
        prompts: list[int] = []
        gens: list[int] = []
        n_stop = n_length = 0
        decode_total = 0.0
        for _ in range(served):
            p = min(prompt_cap, max(16, int(exp(ln_prompt + PROMPT_SIGMA * z[int(random_() * zn)]))))
            limit = SHORT_MAX_TOKENS if random_() < 0.1 else DEFAULT_MAX_TOKENS
            g = 1 + int(exp(ln_gen + GEN_SIGMA * z[int(random_() * zn)]))
            if g >= limit:
                g, n_length = limit, n_length + 1
            else:
                n_stop += 1
            q = -sched_mean * log(1.0 - random_())
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
        h["prompt"].observe_many(prompts)
        h["gen"].observe_many(gens)
        h["queue"].observe_many(queues)
        h["ttft"].observe_many(ttfts)
        h["e2e"].observe_many(e2es)
        h["tpot"].observe_many(tpots)
        itl_count = sum(gens) - served
        if itl_count > 0:
            mean_itl = decode_total / itl_count
            median = mean_itl / (0.9 * math.exp(0.12**2 / 2) + 0.1 * 2.2 * math.exp(0.25**2 / 2))
            h["itl"].observe_lognormal_mix(itl_count, decode_total, ((0.9, median, 0.12), (0.1, 2.2 * median, 0.25)))
        prompt_sum, gen_sum = sum(prompts), sum(gens)
        self.prompt_tokens += prompt_sum
        self.generation_tokens += gen_sum
        self.prefix_queries += prompt_sum
        hit_ratio = rng.uniform(0.05, 0.1) if effects.kv_pressure else rng.uniform(0.35, 0.45)
        self.prefix_hits += int(prompt_sum * hit_ratio)
        self.success["stop"] += n_stop
        self.success["length"] += n_length
        return prompt_sum, gen_sum

    def samples(self) -> list[Sample]:
        """The engine's metrics as vLLM exposes them (V1 names, model_name + engine labels)."""
        lb = self.labels
        last = self.last
        out: list[Sample] = [
            GaugeSample(name="vllm:num_requests_running", labels=lb, value=float(last.running)),
            GaugeSample(name="vllm:num_requests_waiting", labels=lb, value=float(last.waiting)),
            GaugeSample(name="vllm:kv_cache_usage_perc", labels=lb, value=round(last.kv_usage, 5)),
            CounterSample(name="vllm:prompt_tokens_total", labels=lb, value=float(self.prompt_tokens)),
            CounterSample(name="vllm:generation_tokens_total", labels=lb, value=float(self.generation_tokens)),
            CounterSample(name="vllm:num_preemptions_total", labels=lb, value=float(self.preemptions)),
            CounterSample(name="vllm:prefix_cache_queries_total", labels=lb, value=float(self.prefix_queries)),
            CounterSample(name="vllm:prefix_cache_hits_total", labels=lb, value=float(self.prefix_hits)),
        ]
        for reason in FINISHED_REASONS:
            out.append(
                CounterSample(
                    name="vllm:request_success_total",
                    labels={**lb, "finished_reason": reason},
                    value=float(self.success[reason]),
                )
            )
        out.extend(h.sample(lb) for h in self._hist.values())
        return out
