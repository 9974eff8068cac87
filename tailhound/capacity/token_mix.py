"""The token mix of a load test: how long prompts and outputs are, sampled request by request.

Two ways to get one:

- **from a recording** (:func:`profile_from_recording`): the engine's own per-request histograms, signals
  ``tokens.prompt`` and ``tokens.generation`` (vLLM ``vllm:request_prompt_tokens`` /
  ``vllm:request_generation_tokens``, TGI ``tgi_request_input_length`` / ``tgi_request_generated_tokens``,
  NIM ``request_prompt_tokens`` / ``request_generation_tokens``): the observations made while the
  recording ran, i.e. the sum over every source of the increase from each scrape to the next (an engine
  restart, a count that goes down, starts the counting again). A recording with a single scrape per
  source has no increase: its cumulative counts (since the engine started) are used instead. The same
  pass finds the busiest engine's peak request rate and concurrency (:class:`RecordingProfile`).
- **explicit** (:meth:`TokenMix.explicit`): a mean and a spread per side, sampled uniformly in
  ``[mean - spread, mean + spread]`` (spread 0: every request the same length).

Sampling a bucket distribution: a bucket is drawn with its share of the observations, then a length
uniformly among the integers of the bucket, ``(previous bound, bound]`` (the first bucket starts at 0).
Observations above the largest finite bound (the ``+Inf`` bucket) are sampled as that bound. Prompt and
output lengths are drawn independently (the histograms only give each side's distribution). Lengths are
at least 1. A sampler is seeded: the same seed gives the same sequence of ``(prompt, output)`` pairs.

The mix travels to the load driver (a child process) as JSON: :meth:`TokenMix.to_dict` /
:meth:`TokenMix.from_dict`.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tailhound.capacity.model import TokenSummary
from tailhound.errors import TailhoundError

#: The engine jobs whose recordings carry a token mix (the inference engines of the catalog).
ENGINE_JOBS = ("vllm", "tgi", "nim", "sglang")
#: The peak request rate is the highest mean over a window this long (or the whole recording if shorter).
PEAK_WINDOW_S = 60.0
#: Upper bound of a sampled length (a longer one is a broken histogram, not a prompt).
MAX_TOKENS = 1_000_000


class TokenMixError(TailhoundError):
    """A token mix that cannot be built (no histograms in a recording, bad explicit values)."""


@dataclass(frozen=True)
class Lengths:
    """One side's length distribution: uniform integers in ``[low, high]``, or buckets.

    Buckets: ``bounds[i]`` is the upper bound (inclusive) of bucket i, ``weights[i]`` its share of the
    observations; ``overflow`` is the share above the last bound (sampled as the last bound).
    """

    low: int = 1
    high: int = 1
    bounds: tuple[float, ...] = ()
    weights: tuple[float, ...] = ()
    overflow: float = 0.0
    _cum: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)
    _ranges: tuple[tuple[int, int], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.bounds:
            if not 1 <= self.low <= self.high <= MAX_TOKENS:
                raise TokenMixError(f"lengths must satisfy 1 <= low <= high <= {MAX_TOKENS}: {self.low}..{self.high}")
            return
        if len(self.bounds) != len(self.weights):
            raise TokenMixError("bucket bounds and weights differ in length")
        if any(b <= a for a, b in zip(self.bounds, self.bounds[1:], strict=False)) or self.bounds[0] <= 0:
            raise TokenMixError("bucket bounds must be positive and strictly increasing")
        if any(w < 0 or not math.isfinite(w) for w in (*self.weights, self.overflow)):
            raise TokenMixError("bucket weights must be finite and >= 0")
        total = sum(self.weights) + self.overflow
        if total <= 0:
            raise TokenMixError("the histogram has no observations")
        ranges, cum, acc = [], [], 0.0
        top = min(MAX_TOKENS, max(1, math.floor(self.bounds[-1])))
        prev = 0.0
        for bound, w in zip(self.bounds, self.weights, strict=True):
            lo = min(MAX_TOKENS, max(1, math.floor(prev) + 1))
            hi = min(MAX_TOKENS, max(lo, math.floor(bound)))
            ranges.append((lo, hi))
            acc += w / total
            cum.append(acc)
            prev = bound
        ranges.append((top, top))
        cum.append(1.0)
        object.__setattr__(self, "_ranges", tuple(ranges))
        object.__setattr__(self, "_cum", tuple(cum))

    @classmethod
    def explicit(cls, mean: float, spread: float = 0.0) -> Lengths:
        if not (math.isfinite(mean) and math.isfinite(spread)) or mean < 1 or spread < 0 or spread >= mean:
            raise TokenMixError(f"tokens {mean:g} +- {spread:g}: the mean must be >= 1 and the spread in [0, mean)")
        return cls(low=max(1, round(mean - spread)), high=max(1, round(mean + spread)))

    @classmethod
    def from_histogram(cls, bounds: Sequence[float], cumulative: Sequence[float], count: float) -> Lengths:
        """From Prometheus cumulative bucket counts (``counts[i]`` observations ``<= bounds[i]``; ``count``
        is the +Inf bucket)."""
        weights, prev = [], 0.0
        for c in cumulative:
            weights.append(max(0.0, c - prev))
            prev = max(prev, c)
        return cls(bounds=tuple(float(b) for b in bounds), weights=tuple(weights), overflow=max(0.0, count - prev))

    # -- the distribution ---------------------------------------------------------------------------------

    def _parts(self) -> list[tuple[float, int, int]]:
        """(probability, low, high) of each uniform part."""
        if not self.bounds:
            return [(1.0, self.low, self.high)]
        out, prev = [], 0.0
        for c, (lo, hi) in zip(self._cum, self._ranges, strict=True):
            if c > prev:
                out.append((c - prev, lo, hi))
            prev = c
        return out

    def mean(self) -> float:
        return sum(p * (lo + hi) / 2 for p, lo, hi in self._parts())

    def quantile(self, q: float) -> float:
        """The smallest length L with P(length <= L) >= q."""
        acc = 0.0
        parts = self._parts()
        for p, lo, hi in parts:
            if acc + p >= q - 1e-12:
                n = hi - lo + 1
                k = max(1, math.ceil((q - acc) / p * n - 1e-9))
                return float(lo + min(n, k) - 1)
            acc += p
        return float(parts[-1][2])

    def sample(self, rng: random.Random) -> int:
        if not self.bounds:
            return self.low if self.low == self.high else rng.randint(self.low, self.high)
        i = min(bisect_right(self._cum, rng.random()), len(self._cum) - 1)
        lo, hi = self._ranges[i]
        return lo if lo == hi else rng.randint(lo, hi)

    def to_dict(self) -> dict:
        if not self.bounds:
            return {"low": self.low, "high": self.high}
        return {"bounds": list(self.bounds), "weights": list(self.weights), "overflow": self.overflow}

    @classmethod
    def from_dict(cls, data: dict) -> Lengths:
        if "bounds" in data:
            return cls(
                bounds=tuple(data["bounds"]), weights=tuple(data["weights"]), overflow=float(data.get("overflow", 0.0))
            )
        return cls(low=int(data["low"]), high=int(data["high"]))


class TokenSampler:
    """Seeded ``(prompt_tokens, output_tokens)`` pairs."""

    def __init__(self, mix: TokenMix, seed: int) -> None:
        self.mix = mix
        self._rng = random.Random(seed)

    def next(self) -> tuple[int, int]:
        return self.mix.prompt.sample(self._rng), self.mix.output.sample(self._rng)

    def take(self, n: int) -> list[tuple[int, int]]:
        return [self.next() for _ in range(n)]


@dataclass(frozen=True)
class TokenMix:
    prompt: Lengths
    output: Lengths
    source: str = "explicit"

    @classmethod
    def explicit(
        cls, prompt_tokens: float, output_tokens: float, prompt_spread: float = 0.0, output_spread: float = 0.0
    ) -> TokenMix:
        return cls(Lengths.explicit(prompt_tokens, prompt_spread), Lengths.explicit(output_tokens, output_spread))

    def sampler(self, seed: int = 0) -> TokenSampler:
        return TokenSampler(self, seed)

    def summary(self) -> TokenSummary:
        return TokenSummary(
            source=self.source,
            prompt_mean=round(self.prompt.mean(), 3),
            prompt_p95=self.prompt.quantile(0.95),
            output_mean=round(self.output.mean(), 3),
            output_p95=self.output.quantile(0.95),
        )

    def to_dict(self) -> dict:
        return {"source": self.source, "prompt": self.prompt.to_dict(), "output": self.output.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> TokenMix:
        return cls(
            Lengths.from_dict(data["prompt"]), Lengths.from_dict(data["output"]), str(data.get("source", "explicit"))
        )


# --- recordings --------------------------------------------------------------------------------------------


@dataclass
class RecordingProfile:
    """What a recording says about the load: its token mix and the busiest engine's peaks."""

    mix: TokenMix
    #: the highest request rate of one engine over any PEAK_WINDOW_S window (None: too few scrapes)
    peak_rps: float | None
    #: the most requests one engine held (running + waiting) at a scrape (None: no such gauges)
    peak_concurrency: float | None
    #: engine sources seen (node, job, record labels)
    engines: int
    span_s: float
    #: the model named most often by the token histograms' labels (``model_name``), if any
    model: str | None = None


class _Hist:
    """One histogram series followed scrape to scrape: the observations seen while it was recorded."""

    __slots__ = ("bounds", "prev_counts", "prev_count", "delta_counts", "delta_count", "last_counts", "last_count")

    def __init__(self) -> None:
        self.bounds: tuple[float, ...] = ()
        self.prev_counts: list[float] | None = None
        self.prev_count = 0.0
        self.delta_counts: list[float] = []
        self.delta_count = 0.0
        self.last_counts: list[float] = []
        self.last_count = 0.0

    def add(self, bounds: tuple[float, ...], counts: list[float], count: float) -> float:
        """Take one scrape; returns the number of new observations (0 on the first scrape)."""
        if self.prev_counts is None or bounds != self.bounds:
            if self.prev_counts is not None:  # the buckets changed: an engine upgrade, start again
                self.delta_counts, self.delta_count = [], 0.0
            self.bounds, self.prev_counts, self.prev_count = bounds, counts, count
            self.last_counts, self.last_count = counts, count
            return 0.0
        reset = count < self.prev_count or any(c < p for c, p in zip(counts, self.prev_counts, strict=True))
        base = [0.0] * len(counts) if reset else self.prev_counts
        base_count = 0.0 if reset else self.prev_count
        if not self.delta_counts:
            self.delta_counts = [0.0] * len(counts)
        for i, (c, b) in enumerate(zip(counts, base, strict=True)):
            self.delta_counts[i] += c - b
        new = count - base_count
        self.delta_count += new
        self.prev_counts, self.prev_count = counts, count
        self.last_counts, self.last_count = counts, count
        return new


def _merge(series: Iterable[_Hist], use_deltas: bool) -> tuple[tuple[float, ...], list[float], float] | None:
    """Sum the series that share the most common bucket layout."""
    by_bounds: dict[tuple[float, ...], tuple[list[float], float]] = {}
    for h in series:
        counts, count = (h.delta_counts, h.delta_count) if use_deltas else (h.last_counts, h.last_count)
        if not counts or count <= 0:
            continue
        acc, n = by_bounds.get(h.bounds, ([0.0] * len(counts), 0.0))
        by_bounds[h.bounds] = ([a + c for a, c in zip(acc, counts, strict=True)], n + count)
    if not by_bounds:
        return None
    bounds, (counts, count) = max(by_bounds.items(), key=lambda kv: kv[1][1])
    return bounds, counts, count


def _window_peak(points: list[tuple[float, float]], window: float) -> float | None:
    """Highest (C[i] - C[j]) / (t[i] - t[j]) with t[i] - t[j] >= window (the whole span if shorter)."""
    if len(points) < 2:
        return None
    span = points[-1][0] - points[0][0]
    if span <= 0:
        return None
    window = min(window, span)
    best, j = 0.0, 0
    for i in range(1, len(points)):
        t_i, c_i = points[i]
        while j + 1 < i and t_i - points[j + 1][0] >= window:
            j += 1
        dt = t_i - points[j][0]
        if dt >= window * 0.999:
            best = max(best, (c_i - points[j][1]) / dt)
    return best


def profile_from_recording(path: str | Path) -> RecordingProfile:
    """Read a scrape recording (docs/recording-format.md) for its token mix and peaks."""
    from collections import Counter

    from tailhound.agents.exposition import parse_exposition, to_samples
    from tailhound.catalog import default_catalog
    from tailhound.recording import read_records

    catalog = default_catalog()
    hists: dict[str, dict[tuple, _Hist]] = {"tokens.prompt": {}, "tokens.generation": {}}
    requests: dict[tuple, list[tuple[float, float]]] = {}  # source -> (ts, cumulative requests)
    finished: dict[tuple, dict[tuple, _Hist]] = {}  # fallback request counter (engine.requests_finished)
    peak_conc: float | None = None
    models: Counter[str] = Counter()
    sources: set[tuple] = set()
    first_ts = last_ts = None
    for rec in read_records(path):
        if rec.job not in ENGINE_JOBS or rec.error or not rec.body:
            continue
        source = (rec.node, rec.job, tuple(sorted(rec.labels.items())))
        sources.add(source)
        first_ts = rec.ts if first_ts is None else min(first_ts, rec.ts)
        last_ts = rec.ts if last_ts is None else max(last_ts, rec.ts)
        new_requests, saw_prompt, conc = 0.0, False, None
        fin_new, saw_fin = 0.0, False
        for s in to_samples(parse_exposition(rec.body), errors=[]):
            found = catalog.lookup(rec.job, s.name, s.labels)
            if found is None:
                continue
            signal = found[0].name
            key = (source, s.name, tuple(sorted(s.labels.items())))
            if s.kind == "histogram" and signal in hists:
                h = hists[signal].setdefault(key, _Hist())
                new = h.add(tuple(s.le), list(s.counts), s.count)
                if signal == "tokens.prompt":
                    new_requests += new
                    saw_prompt = True
                if model := s.labels.get("model_name"):
                    models[model] += 1
            elif s.kind == "counter" and signal == "engine.requests_finished":
                h = finished.setdefault(source, {}).setdefault(key, _Hist())
                fin_new += h.add((0.0,), [0.0], s.value)
                saw_fin = True
            elif s.kind == "gauge" and signal in ("engine.requests_running", "engine.requests_waiting"):
                conc = (conc or 0.0) + s.value * found[1]
        if saw_prompt or saw_fin:
            pts = requests.setdefault(source, [])
            prev = pts[-1][1] if pts else 0.0
            pts.append((rec.ts, prev + (new_requests if saw_prompt else fin_new)))
        if conc is not None:
            peak_conc = conc if peak_conc is None else max(peak_conc, conc)

    sides = {}
    for signal, series in hists.items():
        merged = _merge(series.values(), use_deltas=True) or _merge(series.values(), use_deltas=False)
        if merged is None:
            raise TokenMixError(
                f"{path}: no {signal} histogram with observations (vLLM vllm:request_prompt_tokens"
                f" / vllm:request_generation_tokens, TGI tgi_request_input_length / "
                f"tgi_request_generated_tokens): give the token lengths explicitly"
            )
        bounds, counts, count = merged
        sides[signal] = Lengths.from_histogram(bounds, counts, count)
    peaks = [p for p in (_window_peak(pts, PEAK_WINDOW_S) for pts in requests.values()) if p is not None]
    mix = TokenMix(sides["tokens.prompt"], sides["tokens.generation"], source=f"recording:{Path(path).name}")
    return RecordingProfile(
        mix=mix,
        peak_rps=max(peaks) if peaks else None,
        peak_concurrency=peak_conc,
        engines=len(sources),
        span_s=(last_ts - first_ts) if first_ts is not None else 0.0,
        model=models.most_common(1)[0][0] if models else None,
    )
