"""A vLLM-like engine (one per node, tensor-parallel over its GPUs) as a per-tick fluid queue.

Each tick: arrivals join the waiting queue; the engine completes as many requests as its current
capacity allows (capacity falls with decode/prefill slowdowns and with KV-cache limits); the
requests completed in the tick are drawn one by one (prompt and output lengths, queue time,
prefill, mean TPOT) and recorded into counters and cumulative histograms with vLLM's names and
bucket bounds. Per-token inter-token latencies are spread over the buckets analytically.

The same engine can export as Hugging Face TGI instead (``kind="tgi"``): TGI's metric names, bucket
bounds and shapes (tgi_request_* histograms in seconds, per-forward-pass tgi_batch_*_duration{method},
tgi_queue_size, tgi_batch_current_size and the token budget, counters without a ``_total`` suffix, no
TTFT, no KV-cache gauge, no labels but ``method`` and ``err``). Its router admits at
most :data:`TGI_MAX_CONCURRENT_REQUESTS` requests (queued + running) and answers the rest 429
("overloaded"), counted in ``tgi_request_failure{err="overloaded"}``. Or as SGLang (``kind="sglang"``):
the vLLM-like engine under SGLang's names, buckets and labels (sglang.py).
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
    TGI_DURATION_BUCKETS,
    TTFT_BUCKETS,
    CumulativeHistogram,
    build_1_2_5_buckets,
    tgi_linear_buckets,
)
from .load import poisson
from .sglang import sglang_histograms, sglang_samples
from .trace import TraceQueue

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
#: The OpenAI-compatible route every simulated request uses (prometheus_fastapi_instrumentator labels).
HTTP_HANDLER = "/v1/chat/completions"
HTTP_STATUSES = ("2xx", "4xx", "5xx")

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

#: Standard-normal quantiles: ``_Z[int(random() * _Z_N)]`` is a (finely quantised) normal draw at a
#: fraction of the cost of ``random.gauss``; hundreds of requests a tick need several draws each.
_Z_N = 4096
_Z = tuple(NormalDist().inv_cdf((i + 0.5) / _Z_N) for i in range(_Z_N))


def _capped_lognormal_mean(median: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for a log-normal X."""
    mu, nd = math.log(median), NormalDist()
    lc = math.log(cap)
    return math.exp(mu + sigma**2 / 2) * nd.cdf((lc - mu - sigma**2) / sigma) + cap * (1.0 - nd.cdf((lc - mu) / sigma))


def mixed_mean_gen(long_share: float) -> float:
    """Mean output length when `long_share` of the requests are long generations (capped at max_tokens)."""
    normal = 0.1 * _capped_lognormal_mean(GEN_MEDIAN, GEN_SIGMA, SHORT_MAX_TOKENS) + 0.9 * _capped_lognormal_mean(
        GEN_MEDIAN, GEN_SIGMA, DEFAULT_MAX_TOKENS
    )
    long = _capped_lognormal_mean(LONG_GEN_MEDIAN, LONG_GEN_SIGMA, DEFAULT_MAX_TOKENS)
    return (1.0 - long_share) * normal + long_share * long


def _capacity(
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
    return _capacity(mean_prompt, min(mean_gen, float(DEFAULT_MAX_TOKENS)), 1.0, 1.0)[0]


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

    def __init__(
        self,
        rng: random.Random,
        model: str,
        kind: str = "vllm",
        http_metrics: bool = False,
        http_rng: random.Random | None = None,
        instance: str = "localhost:3000",
    ) -> None:
        self._rng = rng
        self.kind = kind
        self.tgi = kind == "tgi"
        self.model = model
        #: whether the HTTP status counters are exported (TGI: always, its tgi_request_failure counter)
        self.http_metrics = http_metrics or self.tgi
        self._http_rng = http_rng if http_rng is not None else random.Random(0)
        self.waiting = 0
        self._carry = 0.0
        self.down = False
        self.last = EngineTick(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, ITL_BASE_S)
        #: load-trace requests waiting in the queue (prompt, output tokens)
        self.trace_queue = TraceQueue((MEAN_PROMPT, MEAN_GEN), DEFAULT_MAX_TOKENS)
        if self.tgi:
            # TGI exports no labels; the scrape adds instance (host:port) and the agent config the model.
            self.labels = {"model_name": model, "instance": instance}
            self._hist = {
                "queue": CumulativeHistogram("tgi_request_queue_duration", TGI_DURATION_BUCKETS),
                "tpot": CumulativeHistogram("tgi_request_mean_time_per_token_duration", TGI_DURATION_BUCKETS),
                "e2e": CumulativeHistogram("tgi_request_duration", TGI_DURATION_BUCKETS),
                "validation": CumulativeHistogram("tgi_request_validation_duration", TGI_DURATION_BUCKETS),
                "inference": CumulativeHistogram("tgi_request_inference_duration", TGI_DURATION_BUCKETS),
                "prompt": CumulativeHistogram("tgi_request_input_length", tgi_linear_buckets(TGI_MAX_INPUT_TOKENS)),
                "gen": CumulativeHistogram("tgi_request_generated_tokens", tgi_linear_buckets(TGI_MAX_TOTAL_TOKENS)),
                "max_new": CumulativeHistogram("tgi_request_max_new_tokens", tgi_linear_buckets(TGI_MAX_TOTAL_TOKENS)),
            }
            # backends/v3: one observation per forward pass of the batch, by method
            self._batch_hist = {
                (name, m): CumulativeHistogram(name, TGI_DURATION_BUCKETS)
                for m in TGI_METHODS
                for name in ("tgi_batch_forward_duration", "tgi_batch_inference_duration")
            }
        elif kind == "sglang":  # no engine label: the scraped instance is the engine
            self._batch_hist = {}
            self.labels = {"model_name": model, "instance": instance}
            self._hist = sglang_histograms()
        else:
            self._batch_hist = {}
            self.labels = {"model_name": model, "engine": "0"}
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
        self.http = dict.fromkeys(HTTP_STATUSES, 0)  # responses by status class (vLLM's instrumentator)
        self.received = 0  # TGI: tgi_request_count (every request the router got)
        self.failures: dict[str, int] = {}  # TGI: tgi_request_failure by err
        self._resend = 0  # retry storm: timed-out requests the clients re-send next tick
        self.batch_calls = dict.fromkeys(TGI_METHODS, 0)  # TGI: tgi_batch_inference_count/success by method
        self._reserved = 0.0  # TGI: tokens the running batch has reserved (prompt + max_new_tokens)
        self._stall = 0.0  # share of the tick the decode loop waits for unchunked long prefills
        self._long_prefill_s = 0.0

    def restart(self) -> None:
        """The engine process restarted: counters, histograms and queues start from zero."""
        self._reset_counters()
        for h in self._hist.values():
            h.reset()
        for h in self._batch_hist.values():
            h.reset()
        self.waiting = 0
        self._carry = 0.0
        self.last = EngineTick(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, ITL_BASE_S)
        self.trace_queue.clear()

    def step(
        self,
        dt: float,
        arrivals: int,
        effects: NodeEffects,
        clock_slowdown: float,
        requests: list[tuple[int, int]] | None = None,
    ) -> EngineTick:
        """Advance one tick of `dt` seconds with `arrivals` new requests (`requests`: their (prompt, output)
        tokens, from a load trace; None: drawn from the built-in mix)."""
        if effects.engine_restart:
            self.restart()  # requests arriving while the engine restarts are refused
            return self.last
        if effects.engine_down:  # rolling deploy: drained and replaced; back with fresh counters
            if not self.down:
                self.restart()
                self.down = True
            return self.last
        self.down = False
        rng = self._rng
        s_dec = effects.decode_slowdown * clock_slowdown
        s_pre = effects.prefill_slowdown * clock_slowdown
        long_share = effects.long_gen_share
        if requests is None:
            mean_prompt = min(MEAN_PROMPT * effects.prompt_scale, MAX_MODEL_LEN / 2)
            mean_gen = MEAN_GEN
            if long_share:
                mean_prompt *= 1.0 - long_share * (1.0 - LONG_PROMPT_SCALE)
                mean_gen = mixed_mean_gen(long_share)
        else:  # a trace's mix: the means of what waits and arrives (the requests served next)
            mean_prompt, mean_gen = self._trace_means(requests, effects.prompt_scale, long_share)
        mean_gen *= effects.gen_scale
        self._stall = 0.0
        if effects.long_prompt_share:  # unchunked long prefills stall the decode loop: every step waits
            share = effects.long_prompt_share
            mean_prompt = (1.0 - share) * mean_prompt + share * LONG_PROMPT_MEAN
            self._long_prefill_s = s_pre * (PREFILL_OVERHEAD_S + LONG_PROMPT_MEAN / PREFILL_TOKENS_PER_S)
            self._stall = min(0.6, arrivals / dt * share * self._long_prefill_s)
            s_dec *= 1.0 + self._stall
        capacity_rps, b_cap, kv_limit, ctx, c_eff, prefill_mean = _capacity(mean_prompt, mean_gen, s_dec, s_pre)

        # Fluid queue: serve up to capacity, keep the rest waiting, let clients time out.
        waiting_before = self.waiting
        capacity = capacity_rps * dt + self._carry
        attempts = arrivals
        rejected = 0
        if effects.retry_storm:
            arrivals, attempts = self._storm_admit(arrivals, capacity, capacity_rps)
            rejected = attempts - arrivals
        else:
            self._resend = 0
        backlog = self.waiting + arrivals
        if backlog >= capacity:
            served = int(capacity)
            self._carry = capacity - served
        else:
            served, self._carry = backlog, 0.0
        waiting = backlog - served
        max_waiting = int(capacity_rps * CLIENT_TIMEOUT_S)
        overloaded = 0
        if self.tgi:  # TGI's router holds at most --max-concurrent-requests (queued + running)
            room = max(0, TGI_MAX_CONCURRENT_REQUESTS - int(b_cap))
            if waiting > room:
                overloaded, waiting = waiting - room, room
        if long_share and waiting > HOL_MAX_WAITING:  # the closed-loop client holds back (never sent)
            waiting = HOL_MAX_WAITING
        aborted = max(0, waiting - max_waiting)
        waiting -= aborted
        self.waiting = waiting
        served_requests = (
            None if requests is None else self.trace_queue.advance(requests, arrivals, served, aborted, waiting)
        )
        rate = served / dt
        if effects.retry_storm:
            wait_s = waiting / capacity_rps
            timed_out = min(1.0, max(0.0, (wait_s - 0.75 * STORM_CLIENT_TIMEOUT_S) / (0.5 * STORM_CLIENT_TIMEOUT_S)))
            self._resend = int(served * timed_out * STORM_RESEND)
        if self.http_metrics:
            self._count_http(attempts, served, rejected, overloaded)

        # Running batch: Little's law on the decode loop, saturated while requests wait.
        denom = 1.0 - rate * mean_gen * s_dec * c_eff
        if waiting > 0 or denom <= 0.02:
            running_f = b_cap
        else:
            running_f = min(b_cap, rate * (prefill_mean + mean_gen * s_dec * ITL_BASE_S) / denom)
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
            served,
            itl,
            s_pre,
            running_f,
            util,
            effects,
            dt,
            waiting_before / capacity_rps,
            waiting / capacity_rps,
            served_requests,
        )
        self.success["abort"] += aborted
        if self.tgi:
            self._tgi_batches(dt, served, itl, s_pre, mean_prompt, running_f)
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

    def _trace_means(
        self, requests: list[tuple[int, int]], prompt_scale: float, long_share: float
    ) -> tuple[float, float]:
        """Mean prompt and output lengths of the trace requests waiting and arriving (the last ones when
        none are), as the mix's means are in the built-in case (prompt scale, long generations)."""
        mean_prompt, mean_gen = self.trace_queue.next_means(requests)
        mean_prompt = min(mean_prompt * prompt_scale, MAX_MODEL_LEN / 2)
        if long_share:
            mean_prompt *= 1.0 - long_share * (1.0 - LONG_PROMPT_SCALE)
            mean_gen = (1.0 - long_share) * mean_gen + long_share * _capped_lognormal_mean(
                LONG_GEN_MEDIAN, LONG_GEN_SIGMA, DEFAULT_MAX_TOKENS
            )
        return mean_prompt, mean_gen

    def _storm_admit(self, fresh: int, capacity: float, capacity_rps: float) -> tuple[int, int]:
        """Retry storm: (requests admitted to the queue, HTTP attempts) this tick.

        First attempts are the fresh requests plus the re-sent timed-out ones; the server admits them while
        the queue holds less than STORM_QUEUE_LIMIT_S of work (plus what it serves this tick). A rejected
        request is retried STORM_RETRIES times at once, each retry rejected with the same probability r, so
        the share of requests rejected for good is r**(STORM_RETRIES + 1) and each one costs
        1 + r + ... + r**STORM_RETRIES attempts.
        """
        first = fresh + self._resend
        room = max(0.0, capacity_rps * STORM_QUEUE_LIMIT_S - self.waiting) + capacity
        if first <= room:
            return first, first
        lost = 1.0 - room / first  # share of distinct requests rejected after every retry
        r = lost ** (1.0 / (STORM_RETRIES + 1))
        admitted = int(room)
        tries = (1.0 - lost) / (1.0 - r) if r < 1.0 else float(STORM_RETRIES + 1)
        return admitted, max(admitted, int(round(first * tries)))

    def _count_http(self, attempts: int, served: int, rejected: int, overloaded: int) -> None:
        """HTTP responses of the tick: completions, storm rejections, TGI overload, and a background of bad
        requests and internal errors (drawn from the HTTP stream, so the engine's own draws stay the same)."""
        hr = self._http_rng
        bad = poisson(hr, (attempts + overloaded) * BAD_REQUEST_RATIO)
        err = poisson(hr, (attempts + overloaded) * SERVER_ERROR_RATIO)
        if self.tgi:
            self.received += attempts + overloaded + bad + err
            for key, n in (("overloaded", rejected + overloaded), ("validation", bad), ("generation", err)):
                if n:
                    self.failures[key] = self.failures.get(key, 0) + n
            return
        refused_5xx = int(rejected * STORM_503_SHARE)
        self.http["2xx"] += served
        self.http["4xx"] += rejected - refused_5xx + overloaded + bad
        self.http["5xx"] += refused_5xx + err

    def _complete(
        self, served: int, itl: float, s_pre: float, running_f: float, util: float,
        effects: NodeEffects, dt: float, wait_start: float, wait_end: float,
        requests: list[tuple[int, int]] | None = None,
    ) -> tuple[int, int]:  # fmt: skip
        """Draw the `served` requests that finished this tick and record them (`requests`: their trace tokens;
        a trace's output lengths are what the model generated, so only the context limit truncates them)."""
        rng = self._rng
        random_, exp, log, z, zn = rng.random, math.exp, math.log, _Z, _Z_N
        ln_prompt = math.log(PROMPT_MEDIAN * effects.prompt_scale)
        ln_gen = math.log(GEN_MEDIAN * effects.gen_scale)
        long_prompts, stall = effects.long_prompt_share, self._stall
        ln_long_prompt = math.log(LONG_PROMPT_MEDIAN)
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
        long_share = effects.long_gen_share
        ln_long = math.log(LONG_GEN_MEDIAN)
        tgi = self.tgi
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
                q += self._long_prefill_s * random_()
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
        itl_count = sum(gens) - served
        if tgi:
            self._observe_tgi(prompts, gens, queues, e2es, limits)
        else:
            h["ttft"].observe_many(ttfts)
            h["e2e"].observe_many(e2es)
            if "tpot" in h:  # SGLang has no per-request TPOT histogram
                h["tpot"].observe_many(tpots)
        if itl_count > 0 and not tgi:
            mean_itl = decode_total / itl_count
            median = mean_itl / (0.9 * math.exp(0.12**2 / 2) + 0.1 * 2.2 * math.exp(0.25**2 / 2))
            mix = [(0.9, median, 0.12), (0.1, 2.2 * median, 0.25)]
            if stall:  # the steps that waited for a long prefill: a tail of prefill-long gaps
                mix.append((min(0.5, stall * mean_itl / self._long_prefill_s), self._long_prefill_s, 0.3))
            h["itl"].observe_lognormal_mix(itl_count, decode_total, mix)
        prompt_sum, gen_sum = sum(prompts), sum(gens)
        self.prompt_tokens += prompt_sum
        self.generation_tokens += gen_sum
        self.prefix_queries += prompt_sum
        hit_ratio = rng.uniform(0.05, 0.1) if effects.kv_pressure else rng.uniform(0.35, 0.45)
        self.prefix_hits += int(prompt_sum * hit_ratio)
        self.success["stop"] += n_stop
        self.success["length"] += n_length
        return prompt_sum, gen_sum

    def _tgi_batches(
        self, dt: float, served: int, itl: float, s_pre: float, mean_prompt: float, running_f: float
    ) -> None:
        """TGI's per-forward-pass histograms and counters: a decode pass per ITL while the batch runs, the
        tick's new requests prefilled in at most TGI_PREFILLS_PER_S batches (forward = the model call,
        inference = forward plus the router's bookkeeping)."""
        h = self._batch_hist
        steps = int(dt / itl) if running_f >= 1.0 else 0
        if steps:
            for name, share in (("tgi_batch_forward_duration", 0.93), ("tgi_batch_inference_duration", 1.0)):
                h[(name, "decode")].observe_lognormal_mix(steps, steps * itl * share, ((1.0, itl * share, 0.08),))
        prefills = min(served, int(dt * TGI_PREFILLS_PER_S))
        if prefills:
            each = s_pre * (PREFILL_OVERHEAD_S + served / prefills * mean_prompt / PREFILL_TOKENS_PER_S)
            for name, share in (("tgi_batch_forward_duration", 0.95), ("tgi_batch_inference_duration", 1.0)):
                h[(name, "prefill")].observe_lognormal_mix(
                    prefills, prefills * each * share, ((1.0, each * share, 0.3),)
                )
        self.batch_calls["decode"] += steps
        self.batch_calls["prefill"] += prefills
        self._reserved = min(TGI_MAX_BATCH_TOTAL_TOKENS, running_f * (mean_prompt + MEAN_MAX_NEW_TOKENS))

    def _observe_tgi(
        self, prompts: list[int], gens: list[int], queues: list[float], e2es: list[float], limits: list[int]
    ) -> None:
        """TGI's per-request histograms (router/src/server.rs): inference = prefill + decode, time per token =
        inference / generated tokens, duration = validation (tokenisation) + queue + inference."""
        h = self._hist
        inference = [e - q for e, q in zip(e2es, queues, strict=True)]
        validation = [0.0008 + p * 4e-7 for p in prompts]
        h["inference"].observe_many(inference)
        h["tpot"].observe_many(i / g for i, g in zip(inference, gens, strict=True))
        h["validation"].observe_many(validation)
        h["e2e"].observe_many(v + e for v, e in zip(validation, e2es, strict=True))
        h["max_new"].observe_many(limits)

    def samples(self) -> list[Sample]:
        """The engine's metrics as its server exposes them (vLLM: V1 names, model_name + engine labels)."""
        if self.tgi:
            return self._tgi_samples()
        if self.kind == "sglang":
            return sglang_samples(self, self._hist, self.model, KV_CAPACITY_TOKENS)
        out = self._vllm_samples()
        if self.http_metrics:
            for status in HTTP_STATUSES:  # a label set appears with its first request, as in prometheus_client
                if self.http[status]:
                    out.append(
                        CounterSample(
                            name="http_requests_total",
                            value=float(self.http[status]),
                            labels={"handler": HTTP_HANDLER, "method": "POST", "status": status},
                        )
                    )
        return out

    def _tgi_samples(self) -> list[Sample]:
        """TGI's metrics (tests/agents/fixtures/tgi.prom and tgi_v3.prom: no labels but ``method`` and ``err``,
        counters without ``_total``; counters, gauges, histograms, as metrics-exporter-prometheus renders)."""
        last = self.last
        g, c = GaugeSample, CounterSample
        out: list[Sample] = []
        for name in ("tgi_batch_inference_count", "tgi_batch_inference_success"):
            out.extend(c(name=name, labels={"method": m}, value=float(self.batch_calls[m])) for m in TGI_METHODS)
        out.append(c(name="tgi_request_count", value=float(self.received)))
        for err in sorted(self.failures):  # metrics-rs registers a label set on its first increment
            out.append(c(name="tgi_request_failure", labels={"err": err}, value=float(self.failures[err])))
        out += [
            c(name="tgi_request_success", value=float(self.success["stop"] + self.success["length"])),
            g(name="tgi_batch_current_max_tokens", value=float(int(self._reserved) if last.running else 0)),
            g(name="tgi_batch_current_size", value=float(last.running)),
            g(name="tgi_batch_max_total_tokens", value=float(TGI_MAX_BATCH_TOTAL_TOKENS)),
            g(name="tgi_queue_size", value=float(last.waiting)),
        ]
        out.extend(h.sample({"method": m}) for (_name, m), h in self._batch_hist.items())
        out.extend(h.sample({}) for h in self._hist.values())
        return out

    def _vllm_samples(self) -> list[Sample]:
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
