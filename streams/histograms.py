"""Quantiles of cumulative bucket histograms, as PromQL's ``histogram_quantile`` computes them (pure).

:func:`histogram_quantile` follows ``bucketQuantile`` in Prometheus' ``promql/quantile.go``: buckets
sorted by upper bound, buckets with the same bound coalesced (summed), float-precision noise between
neighbouring buckets ignored (relative difference below 1e-12, ``almost.Equal``), then monotonicity
forced (a bucket below its predecessor is raised to it), then linear interpolation inside the bucket
the rank falls into. The lowest bucket starts at 0 when its bound is positive (else its bound is
returned); a rank in the ``+Inf`` bucket returns the largest finite bound. ``q < 0`` gives ``-inf``,
``q > 1`` ``+inf``, a NaN ``q`` NaN. Where Prometheus answers NaN because the data cannot answer
(no observations, no ``+Inf`` bucket, only the ``+Inf`` bucket), this module returns ``None``.

:class:`Histogram` is one such histogram with its sum; :func:`merge` adds histograms of several
series (``sum by (le)``), re-bucketing when their bounds differ. :class:`LatencyWindow` keeps the
per-interval deltas of one series over a rolling event-time window (compact JSON state for a table).
"""

from __future__ import annotations

import math
import operator
import sys
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from tailhound.snapshot import HistogramDelta

#: Prometheus' ``smallDeltaTolerance``: relative differences below this are float noise.
SMALL_DELTA_TOLERANCE = 1e-12
_MIN_NORMAL = sys.float_info.min  # smallest positive normal float64, as in prometheus/util/almost


def almost_equal(a: float, b: float, epsilon: float) -> bool:
    """Prometheus' ``almost.Equal``: `a` and `b` differ by less than `epsilon` times their absolute sum."""
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < _MIN_NORMAL:
        return diff < epsilon * _MIN_NORMAL
    return diff / min(abs_sum, sys.float_info.max) < epsilon


def ensure_monotonic(counts: list[float], tolerance: float = SMALL_DELTA_TOLERANCE) -> tuple[bool, bool]:
    """Prometheus' ``ensureMonotonicAndIgnoreSmallDeltas``, in place on cumulative `counts`.

    A count within `tolerance` of the last accepted one is set to it (either direction); a count below
    it is raised to it. Returns (monotonicity was forced, precision noise was ignored).
    """
    forced = fixed = False
    prev = counts[0]
    for i in range(1, len(counts)):
        curr = counts[i]
        if curr == prev:
            continue
        if almost_equal(prev, curr, tolerance):
            counts[i] = prev
            fixed = True
        elif curr < prev:
            counts[i] = prev
            forced = True
        else:
            prev = curr
    return forced, fixed


def histogram_quantile(q: float, le: Sequence[float], counts: Sequence[float], count: float | None) -> float | None:
    """The `q`-quantile of a cumulative histogram: ``counts[i]`` observations were ``<= le[i]``.

    `count` is the ``+Inf`` bucket (all observations), as in :class:`tailhound.snapshot.HistogramSample`;
    pass ``None`` when `le` itself ends with ``+Inf`` (a bound that occurs twice is summed, as
    Prometheus does with two series of the same ``le``). ``None`` where Prometheus returns NaN for
    lack of data: no observations, no ``+Inf`` bucket, fewer than two buckets. ``q == 0`` with an
    empty first bucket of positive bound is NaN, as in Prometheus (0/0).
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    prepared = prepare_buckets(le, counts, count)
    return None if prepared is None else _quantile_of(q, *prepared)


#: Above this, neighbouring integral counts could be within SMALL_DELTA_TOLERANCE of each other.
_EXACT_COUNTS = 1e11


def prepare_buckets(
    le: Sequence[float], counts: Sequence[float], count: float | None
) -> tuple[list[float], list[float]] | None:
    """What every quantile of one histogram shares: bounds ending with ``+Inf`` and their cumulative
    counts, sorted, coalesced and made monotonic as :func:`histogram_quantile` describes; None when no
    quantile can be answered (no observations, no ``+Inf`` bucket, fewer than two buckets)."""
    if len(le) != len(counts):
        raise ValueError(f"le has {len(le)} bounds but counts has {len(counts)} values")
    bounds = list(map(float, le))
    cum = list(map(float, counts))
    if count is not None and bounds and bounds[-1] < math.inf and all(map(operator.lt, bounds, bounds[1:])):
        # already sorted with distinct finite bounds (every window histogram): nothing to coalesce
        bounds.append(math.inf)
        cum.append(float(count))
    else:
        bounds, cum = _coalesced(bounds, cum, count)
        if not bounds or bounds[-1] != math.inf:
            return None
    if not _monotonic_already(cum):
        ensure_monotonic(cum)
    if len(cum) < 2 or cum[-1] == 0:
        return None
    return bounds, cum


def _coalesced(le: list[float], counts: list[float], count: float | None) -> tuple[list[float], list[float]]:
    pairs = sorted(zip(le, counts, strict=True), key=lambda p: p[0])
    if count is not None:
        pairs.append((math.inf, float(count)))
    bounds: list[float] = []
    cum: list[float] = []
    for bound, c in pairs:  # coalesceBuckets
        if bounds and bound == bounds[-1]:
            cum[-1] += c
        else:
            bounds.append(bound)
            cum.append(c)
    return bounds, cum


def _monotonic_already(cum: list[float]) -> bool:
    """True when ensure_monotonic would change nothing: non-decreasing non-negative whole counts below
    1e11, whose distinct neighbours therefore differ by far more than the float-noise tolerance."""
    try:
        return (
            bool(cum)
            and cum[0] >= 0
            and cum[-1] < _EXACT_COUNTS
            and all(map(float.is_integer, cum))
            and all(map(operator.le, cum, cum[1:]))
        )
    except TypeError:  # not all floats
        return False


def _quantile_of(q: float, bounds: list[float], cum: list[float]) -> float:
    rank = q * cum[-1]
    b = bisect_left(cum, rank, 0, len(cum) - 1)  # sort.Search: first bucket with cum >= rank
    if b == len(cum) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, in_bucket = 0.0, bounds[b], cum[b]
    if b > 0:
        start = bounds[b - 1]
        in_bucket -= cum[b - 1]
        rank -= cum[b - 1]
    if in_bucket == 0:
        return math.nan if rank == 0 else math.inf
    return start + (end - start) * (rank / in_bucket)


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram with finite, strictly increasing bounds; `count` is the ``+Inf`` bucket."""

    le: tuple[float, ...]
    counts: tuple[float, ...]
    count: float
    sum: float = 0.0

    def __post_init__(self) -> None:
        if len(self.le) != len(self.counts):
            raise ValueError(f"le has {len(self.le)} bounds but counts has {len(self.counts)} values")

    @classmethod
    def from_delta(cls, le: Sequence[float], delta: HistogramDelta) -> Histogram:
        """The per-interval histogram of a sample's delta (same bounds as the sample)."""
        return cls(tuple(le), tuple(delta.counts), delta.count, delta.sum)

    def quantile(self, q: float) -> float | None:
        if math.isnan(q) or not 0 <= q <= 1:
            return histogram_quantile(q, self.le, self.counts, self.count)
        prepared = self._prepared
        return None if prepared is None else _quantile_of(q, *prepared)

    @cached_property
    def _prepared(self) -> tuple[list[float], list[float]] | None:
        """Sorted, coalesced, monotonic buckets: shared by every quantile asked of this histogram."""
        return prepare_buckets(self.le, self.counts, self.count)

    def mean(self) -> float | None:
        """``sum / count``; None without observations."""
        return self.sum / self.count if self.count > 0 else None


def cumulative_at(h: Histogram, x: float) -> float:
    """Observations ``<= x`` in `h`, interpolated linearly between its bounds (0 at 0 below a positive
    first bound, as :func:`histogram_quantile` assumes). Above the largest finite bound the count stays
    at that bound's: where the ``+Inf`` bucket's observations lie is unknown."""
    le, counts = h.le, h.counts
    j = bisect_left(le, x)
    if j < len(le) and le[j] == x:
        return counts[j]
    if j == len(le):
        return counts[-1]
    if j == 0:
        if le[0] <= 0 or x <= 0:
            return 0.0
        lo_b, lo_c = 0.0, 0.0
    else:
        lo_b, lo_c = le[j - 1], counts[j - 1]
    return lo_c + (counts[j] - lo_c) * (x - lo_b) / (le[j] - lo_b)


def merge(histograms: Iterable[Histogram]) -> Histogram | None:
    """One histogram of all observations of `histograms` (several engines of a model, a fleet).

    Equal bounds: counts, count and sum are added, exactly as ``sum by (le)`` in PromQL. Different
    bounds (TGI's exponential buckets next to vLLM's): every histogram is re-bucketed onto the union of
    all bounds by linear interpolation of its cumulative counts (after Prometheus' monotonicity fix),
    then added. That is an approximation, the same one ``histogram_quantile`` makes inside a bucket; a
    histogram's observations above its own largest bound stay in the ``+Inf`` bucket. None for no input.
    """
    hs = list(histograms)
    if not hs:
        return None
    first = hs[0]
    count = sum(h.count for h in hs)
    total = sum(h.sum for h in hs)
    if all(h.le == first.le for h in hs):
        counts = [sum(col) for col in zip(*(h.counts for h in hs), strict=True)]
        return Histogram(first.le, tuple(counts), count, total)
    union = sorted({b for h in hs for b in h.le})
    merged = [0.0] * len(union)
    for h in hs:
        fixed = list(h.counts)
        if fixed:
            ensure_monotonic(fixed)
        fixed_h = Histogram(h.le, tuple(fixed), h.count, h.sum)
        for i, x in enumerate(union):
            merged[i] += cumulative_at(fixed_h, x) if fixed else 0.0
    return Histogram(tuple(union), tuple(merged), count, total)


def _clean(x: float) -> float:
    """Round float noise away (6 decimals) so that state survives a JSON round trip unchanged."""
    return round(x, 6) + 0.0  # + 0.0 turns -0.0 into 0.0


def _compact(x: float) -> float | int:
    """JSON-friendly: integral values as ints (``57`` instead of ``57.0``)."""
    return int(x) if x.is_integer() and abs(x) < 2**53 else x
