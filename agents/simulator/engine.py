"""A vLLM-like engine (one per node, tensor-parallel over its GPUs) as a per-tick fluid queue.

Each tick: arrivals join the waiting queue; the engine completes as many requests as its current capacity
allows (capacity falls with decode/prefill slowdowns and with KV-cache limits, :mod:`.engine_params`); the
requests completed in the tick are drawn one by one (prompt and output lengths, queue time, prefill, mean TPOT)
and recorded into counters and cumulative histograms. The same engine exports as vLLM (:mod:`.vllm`), TGI
(:mod:`.tgi`) or SGLang (:mod:`.sglang`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from tailhound.snapshot import Sample

from .engine_params import (
    BAD_REQUEST_RATIO,
    CLIENT_TIMEOUT_S,
    DEFAULT_MAX_TOKENS,
    FINISHED_REASONS,
    HOL_MAX_WAITING,
    HTTP_STATUSES,
    ITL_BASE_S,
    KV_CAPACITY_TOKENS,
    LONG_GEN_MEDIAN,
    LONG_GEN_SIGMA,
    LONG_PROMPT_MEAN,
    LONG_PROMPT_SCALE,
    MAX_MODEL_LEN,
    MAX_NUM_SEQS,
    MEAN_GEN,
    MEAN_PROMPT,
    PREFILL_OVERHEAD_S,
    PREFILL_TOKENS_PER_S,
    SERVER_ERROR_RATIO,
    STORM_503_SHARE,
    STORM_CLIENT_TIMEOUT_S,
    STORM_QUEUE_LIMIT_S,
    STORM_RESEND,
    STORM_RETRIES,
    capped_lognormal_mean,
    engine_capacity,
    mixed_mean_gen,
)
from .faults import NodeEffects
from .load import poisson
from .request_draws import draw_finished
from .sglang import sglang_histograms, sglang_samples
from .tgi import (
    TGI_MAX_CONCURRENT_REQUESTS,
    TGI_METHODS,
    observe_tgi_batches,
    observe_tgi_requests,
    tgi_batch_histograms,
    tgi_histograms,
    tgi_samples,
)
from .trace import TraceQueue
from .vllm import vllm_histograms, vllm_samples


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
            self._hist = tgi_histograms()
            self._batch_hist = tgi_batch_histograms()
        elif kind == "sglang":  # no engine label: the scraped instance is the engine
            self._batch_hist = {}
            self.labels = {"model_name": model, "instance": instance}
            self._hist = sglang_histograms()
        else:
            self._batch_hist = {}
            self.labels = {"model_name": model, "engine": "0"}
            self._hist = vllm_histograms()
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
        self.reserved_tokens = 0.0  # TGI: tokens the running batch has reserved (prompt + max_new_tokens)
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
        capacity_rps, b_cap, kv_limit, ctx, c_eff, prefill_mean = engine_capacity(mean_prompt, mean_gen, s_dec, s_pre)

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
            decode_passes, prefill_passes, self.reserved_tokens = observe_tgi_batches(
                self._batch_hist, dt, served, itl, s_pre, mean_prompt, running_f
            )
            self.batch_calls["decode"] += decode_passes
            self.batch_calls["prefill"] += prefill_passes
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
            mean_gen = (1.0 - long_share) * mean_gen + long_share * capped_lognormal_mean(
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
        """Draw the `served` requests that finished this tick and record them; (prompt, output) tokens summed."""
        rng, h, tgi, stall = self._rng, self._hist, self.tgi, self._stall
        done = draw_finished(
            rng, served, itl, s_pre, running_f, util, effects, stall, self._long_prefill_s, wait_start, wait_end,
            tgi, requests,
        )  # fmt: skip
        prompts, gens, queues, e2es, decode_total = done.prompts, done.gens, done.queues, done.e2es, done.decode_total
        h["prompt"].observe_many(prompts)
        h["gen"].observe_many(gens)
        h["queue"].observe_many(queues)
        itl_count = sum(gens) - served
        if tgi:
            observe_tgi_requests(h, prompts, gens, queues, e2es, done.limits)
        else:
            h["ttft"].observe_many(done.ttfts)
            h["e2e"].observe_many(e2es)
            if "tpot" in h:  # SGLang has no per-request TPOT histogram
                h["tpot"].observe_many(done.tpots)
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
        self.success["stop"] += done.n_stop
        self.success["length"] += done.n_length
        return prompt_sum, gen_sum

    def samples(self) -> list[Sample]:
        """The engine's metrics as its server exposes them."""
        if self.tgi:
            return tgi_samples(self, self._hist, self._batch_hist)
        if self.kind == "sglang":
            return sglang_samples(self, self._hist, self.model, KV_CAPACITY_TOKENS)
        return vllm_samples(self, self._hist)
