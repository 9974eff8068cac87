"""Cumulative (Prometheus-style) histogram accumulator and the real vLLM V1 bucket bounds."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable

from tailhound.snapshot import HistogramSample

#: vllm:time_to_first_token_seconds (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
#: vllm:inter_token_latency_seconds and vllm:request_time_per_output_token_seconds.
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
#: vllm:e2e_request_latency_seconds and the request phase histograms (queue, inference, ...).
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def tgi_duration_buckets() -> tuple[float, ...]:
    """TGI's bounds for every ``*_duration`` histogram (router/src/server.rs, huggingface/text-generation-inference
    db931fc): 35 exponential buckets, ``value = 0.0001; value *= 1.5`` before each push (0.00015 .. ~145.7 s)."""
    out: list[float] = []
    value = 0.0001
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return tuple(out)


def tgi_linear_buckets(max_tokens: int) -> tuple[float, ...]:
    """TGI's token-count bounds: ``(max / 100.0) * (x + 1)`` for x in 0..99 (tgi_request_input_length with
    --max-input-tokens, tgi_request_generated_tokens and tgi_request_max_new_tokens with --max-total-tokens)."""
    return tuple((max_tokens / 100.0) * (x + 1) for x in range(100))


#: TGI histogram bounds (the text-generation-inference router, see the functions above).
TGI_DURATION_BUCKETS: tuple[float, ...] = tgi_duration_buckets()


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to `max_value` inclusive."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return tuple(float(v) for v in out)
            out.append(value)
        exponent += 1


class CumulativeHistogram:
    """Accumulates observations into buckets; emits Prometheus-style cumulative counts."""

    __slots__ = ("name", "le", "_bins", "count", "sum")

    def __init__(self, name: str, le: Iterable[float]) -> None:
        self.name = name
        self.le: tuple[float, ...] = tuple(le)
        self._bins = [0] * (len(self.le) + 1)  # last bin: above the largest finite bound
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Record one observation (``le`` bounds are inclusive, as in Prometheus)."""
        self._bins[bisect_left(self.le, value)] += 1
        self.count += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        """Record several observations."""
        bins, le = self._bins, self.le
        n, total = 0, 0.0
        for v in values:
            bins[bisect_left(le, v)] += 1
            n += 1
            total += v
        self.count += n
        self.sum += total

    def observe_lognormal_mix(self, count: int, total: float, components: Iterable[tuple[float, float, float]]) -> None:
        """Record `count` observations summing to `total`, spread over the buckets like a mixture.

        `components` are ``(weight, median, sigma)`` of log-normal parts; the expected share of each
        bucket is rounded cumulatively, so the counts stay integral and monotonic. This keeps
        per-token histograms (thousands of observations a tick) cheap.
        """
        if count <= 0:
            return
        comps = [(w, math.log(max(med, 1e-12)), max(s, 1e-6)) for w, med, s in components]
        wsum = sum(w for w, _, _ in comps) or 1.0
        prev = 0
        for i, bound in enumerate(self.le):
            lb = math.log(bound)
            cdf = sum(w * 0.5 * (1.0 + math.erf((lb - mu) / (s * math.sqrt(2.0)))) for w, mu, s in comps)
            cum = min(count, int(round(count * cdf / wsum)))
            cum = max(cum, prev)
            self._bins[i] += cum - prev
            prev = cum
        self._bins[-1] += count - prev
        self.count += count
        self.sum += total

    def reset(self) -> None:
        """Forget every observation (the process restarted)."""
        self._bins = [0] * (len(self.le) + 1)
        self.count = 0
        self.sum = 0.0

    def cumulative_counts(self) -> list[float]:
        """``counts[i]`` = observations ``<= le[i]``."""
        out: list[float] = []
        acc = 0
        for c in self._bins[:-1]:
            acc += c
            out.append(float(acc))
        return out

    def sample(self, labels: dict[str, str]) -> HistogramSample:
        """The histogram as a wire sample (valid by construction, so pydantic's checks are skipped)."""
        return HistogramSample.model_construct(
            name=self.name,
            labels=labels,
            le=list(self.le),
            counts=self.cumulative_counts(),
            count=float(self.count),
            sum=round(self.sum, 6),
        )
