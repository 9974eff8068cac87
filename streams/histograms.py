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
import sys
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
    if len(le) != len(counts):
        raise ValueError(f"le has {len(le)} bounds but counts has {len(counts)} values")
    pairs = sorted(zip((float(b) for b in le), (float(c) for c in counts), strict=True), key=lambda p: p[0])
    if count is not None:
        pairs.append((math.inf, float(count)))
    if not pairs or pairs[-1][0] != math.inf:
        return None
    bounds: list[float] = []
    cum: list[float] = []
    for bound, c in pairs:  # coalesceBuckets
        if bounds and bound == bounds[-1]:
            cum[-1] += c
        else:
            bounds.append(bound)
            cum.append(c)
    ensure_monotonic(cum)
    if len(cum) < 2 or cum[-1] == 0:
        return None
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
        return histogram_quantile(q, self.le, self.counts, self.count)

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


@dataclass(frozen=True)
class Interval:
    """The bucket increases of one collection interval ``(ts - span_s, ts]``; `gap`: it spans missed
    collections."""

    ts: float
    span_s: float
    gap: bool
    count: float
    sum: float
    counts: tuple[float, ...]

    def to_list(self) -> list:
        counts = list(self.counts)
        while counts and counts[-1] == self.count:  # implied: the +Inf bucket's count
            counts.pop()
        return [_compact(self.ts), _compact(self.span_s), int(self.gap), _compact(self.count), _compact(self.sum),
                [_compact(c) for c in counts]]

    @classmethod
    def from_list(cls, item: list, buckets: int) -> Interval:
        ts, span, gap, count, total, counts = item
        values = [float(c) for c in counts]
        if len(values) > buckets:
            raise ValueError(f"interval has {len(values)} bucket counts for {buckets} bounds")
        values += [float(count)] * (buckets - len(values))
        return cls(float(ts), float(span), bool(gap), float(count), float(total), tuple(values))


class LatencyWindow:
    """A rolling event-time window of the per-interval histogram deltas of ONE series.

    An interval counts at time `now` when its end ``ts`` lies in ``(now - window_s, now]``; intervals
    that can no longer count (``ts <= newest - window_s``) are dropped, and at most `max_intervals`
    are kept (the oldest go first). Intervals must arrive in event-time order: one not newer than
    the newest kept is a re-delivery and ignored. A change of bucket bounds starts the window over.
    Values are rounded to 6 decimals on the way in, so :meth:`to_dict` / :meth:`from_dict` give back
    exactly the same window (a restored worker computes what the uninterrupted one would).
    """

    def __init__(self, window_s: float = 300.0, max_intervals: int = 64) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if max_intervals < 1:
            raise ValueError(f"max_intervals must be >= 1, got {max_intervals}")
        self.window_s = float(window_s)
        self.max_intervals = int(max_intervals)
        self.le: tuple[float, ...] = ()
        self.intervals: list[Interval] = []

    @property
    def last_ts(self) -> float | None:
        return self.intervals[-1].ts if self.intervals else None

    def add(self, ts: float, prev_ts: float | None, delta: HistogramDelta | None, le: Sequence[float],
            gap: bool = False) -> bool:
        """Add the increase over ``(prev_ts, ts]``; False when ignored (first sight of the series, no
        delta, a re-delivery, non-finite values). An interval whose start is not the previous
        interval's end, or flagged `gap`, is kept and marked as spanning a gap. Negative counts (never
        from the agent, which folds resets into the delta) are clamped to 0."""
        if prev_ts is None or delta is None or not (math.isfinite(ts) and math.isfinite(prev_ts)) or ts <= prev_ts:
            return False
        if len(delta.counts) != len(le):
            raise ValueError(f"delta has {len(delta.counts)} bucket counts for {len(le)} bounds")
        values = [*delta.counts, delta.count, delta.sum]
        if not all(math.isfinite(v) for v in values):
            return False
        ts, prev_ts = _clean(ts), _clean(prev_ts)
        last = self.last_ts
        if last is not None and ts <= last:
            return False
        bounds = tuple(float(b) for b in le)
        if bounds != self.le:
            self.le, self.intervals, last = bounds, [], None
        interval = Interval(ts=ts, span_s=_clean(ts - prev_ts), gap=bool(gap) or (last is not None and prev_ts != last),
                            count=_clean(max(delta.count, 0.0)), sum=_clean(delta.sum),
                            counts=tuple(_clean(max(c, 0.0)) for c in delta.counts))
        self.intervals.append(interval)
        self._prune(ts)
        return True

    def _prune(self, newest: float) -> None:
        horizon = newest - self.window_s
        drop = 0
        while drop < len(self.intervals) and self.intervals[drop].ts <= horizon:
            drop += 1
        drop = max(drop, len(self.intervals) - self.max_intervals)
        if drop:
            del self.intervals[:drop]

    def inside(self, now: float) -> list[Interval]:
        """The intervals that count at `now`: end in ``(now - window_s, now]``."""
        start = now - self.window_s
        return [iv for iv in self.intervals if start < iv.ts <= now]

    def histogram(self, now: float) -> Histogram | None:
        """All observations of the window at `now` as one histogram; None when no interval is inside."""
        inside = self.inside(now)
        if not inside:
            return None
        counts = [0.0] * len(self.le)
        count = total = 0.0
        for iv in inside:
            for i, c in enumerate(iv.counts):
                counts[i] += c
            count += iv.count
            total += iv.sum
        return Histogram(self.le, tuple(counts), count, total)

    def quantile(self, q: float, now: float) -> float | None:
        h = self.histogram(now)
        return h.quantile(q) if h is not None else None

    def count(self, now: float) -> float:
        """Observations in the window at `now`."""
        return sum(iv.count for iv in self.inside(now))

    def mean(self, now: float) -> float | None:
        h = self.histogram(now)
        return h.mean() if h is not None else None

    def gaps(self, now: float) -> int:
        """Intervals inside the window at `now` that span missed collections."""
        return sum(iv.gap for iv in self.inside(now))

    def to_dict(self) -> dict:
        """Compact JSON-able state: bounds once, then ``[ts, span_s, gap, count, sum, counts]`` per
        interval, cumulative counts without the trailing ones equal to ``count``."""
        return {"window_s": _compact(self.window_s), "max_intervals": self.max_intervals,
                "le": [_compact(b) for b in self.le], "intervals": [iv.to_list() for iv in self.intervals]}

    @classmethod
    def from_dict(cls, data: dict) -> LatencyWindow:
        window = cls(float(data["window_s"]), int(data["max_intervals"]))
        window.le = tuple(float(b) for b in data["le"])
        window.intervals = [Interval.from_list(item, len(window.le)) for item in data["intervals"]]
        return window

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyWindow):
            return NotImplemented
        return (self.window_s, self.max_intervals, self.le, self.intervals) == (
            other.window_s, other.max_intervals, other.le, other.intervals)

    __hash__ = None  # type: ignore[assignment]
