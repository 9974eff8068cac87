"""The rolling event-time window of one latency series: per-interval histogram deltas (pure).

:class:`LatencyWindow` keeps the bucket increases of each collection interval of ONE series
(:class:`Interval`) and answers the window's histogram at an event time. It is re-exported by
:mod:`tailhound.streams.histograms`.

Cost notes (every vLLM snapshot adds 7 intervals and reads 7 window histograms): whole-number bucket
counts (what the agent sends: observation counts) are added column-wise in C, which is exact for whole
numbers below 2**53, so the result is the same as the interval-by-interval loop used otherwise; the
window histogram is kept until the window changes; an interval's JSON form is built once.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

from tailhound.snapshot import HistogramDelta

from .histograms import Histogram, _clean, _compact

#: Whole counts below this stay exact (below 2**53) when up to _EXACT_INTERVALS intervals are added up.
_EXACT_WHOLE = 2.0**40
_EXACT_INTERVALS = 4096


def _whole(values: Sequence[float]) -> bool:
    """Non-negative whole floats below _EXACT_WHOLE (then rounding and summing them are exact)."""
    try:
        return not values or (min(values) >= 0 and max(values) < _EXACT_WHOLE and all(map(float.is_integer, values)))
    except TypeError:  # not all floats
        return False


@dataclass(frozen=True, slots=True)
class Interval:
    """The bucket increases of one collection interval ``(ts - span_s, ts]``; `gap`: it spans missed
    collections. Slotted: a node keeps ~80 of them."""

    ts: float
    span_s: float
    gap: bool
    count: float
    sum: float
    counts: tuple[float, ...]
    _whole_memo: bool | None = field(default=None, init=False, compare=False, repr=False)
    _list_memo: list | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def whole(self) -> bool:
        """Every bucket count is a whole number (see _whole)."""
        whole = self._whole_memo
        if whole is None:
            whole = _whole(self.counts)
            object.__setattr__(self, "_whole_memo", whole)
        return whole

    def to_list(self) -> list:
        """``[ts, span_s, gap, count, sum, counts]``; built once per interval (the same list every time:
        do not change it)."""
        as_list = self._list_memo
        if as_list is None:
            as_list = self._build_list()
            object.__setattr__(self, "_list_memo", as_list)
        return as_list

    def _build_list(self) -> list:
        counts = list(self.counts)
        while counts and counts[-1] == self.count:  # implied: the +Inf bucket's count
            counts.pop()
        compact = list(map(int, counts)) if self.whole else [_compact(c) for c in counts]  # _compact of whole ones
        return [
            _compact(self.ts),
            _compact(self.span_s),
            int(self.gap),
            _compact(self.count),
            _compact(self.sum),
            compact,
        ]

    @classmethod
    def from_list(cls, item: list, buckets: int) -> Interval:
        ts, span, gap, count, total, counts = item
        values = [float(c) for c in counts]
        if len(values) > buckets:
            raise ValueError(f"interval has {len(values)} bucket counts for {buckets} bounds")
        values += [float(count)] * (buckets - len(values))
        return cls(float(ts), float(span), bool(gap), float(count), float(total), _shared(values))


#: one float object per small whole count, shared by every interval (a window holds ~20 intervals of ~20 counts
#: per series: their own float objects were a fifth of a node's memory)
_SHARED = {float(i): float(i) for i in range(4096)}


def _shared(counts: Sequence[float]) -> tuple[float, ...]:
    """`counts` (whole, non-negative) with the shared float of each small one; the same values."""
    get = _SHARED.get
    return tuple([get(c, c) for c in counts])


def _clean_counts(counts: Sequence[float]) -> tuple[float, ...]:
    """``_clean(max(c, 0.0))`` of every count; for whole non-negative counts that is ``c + 0.0``."""
    if _whole(counts):
        return _shared(tuple(map(operator.add, counts, repeat(0.0))))  # + 0.0 turns -0.0 into 0.0, as _clean does
    return tuple(_clean(max(c, 0.0)) for c in counts)


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
        #: (now, le, the intervals it was computed from) -> the window's histogram at now
        self._last: tuple[float, tuple[float, ...], list[Interval], Histogram | None] | None = None
        #: column sums of the counts of `_summed` (the kept intervals when they were all whole), see _totals
        self._summed: list[Interval] = []
        self._sums: list[float] = []
        #: (le, its JSON form), see to_dict
        self._le_json: tuple[tuple[float, ...], list] | None = None

    @property
    def last_ts(self) -> float | None:
        return self.intervals[-1].ts if self.intervals else None

    def add(
        self, ts: float, prev_ts: float | None, delta: HistogramDelta | None, le: Sequence[float], gap: bool = False
    ) -> bool:
        """Add the increase over ``(prev_ts, ts]``; False when ignored (first sight of the series, no
        delta, a re-delivery, non-finite values). An interval whose start is not the previous
        interval's end, or flagged `gap`, is kept and marked as spanning a gap. Negative counts (never
        from the agent, which folds resets into the delta) are clamped to 0."""
        if prev_ts is None or delta is None or not (math.isfinite(ts) and math.isfinite(prev_ts)) or ts <= prev_ts:
            return False
        if len(delta.counts) != len(le):
            raise ValueError(f"delta has {len(delta.counts)} bucket counts for {len(le)} bounds")
        if not (math.isfinite(delta.count) and math.isfinite(delta.sum) and all(map(math.isfinite, delta.counts))):
            return False
        ts, prev_ts = _clean(ts), _clean(prev_ts)
        last = self.last_ts
        if last is not None and ts <= last:
            return False
        bounds = tuple(map(float, le))
        if bounds != self.le:
            self.le, self.intervals, last = bounds, [], None
        interval = Interval(
            ts=ts,
            span_s=_clean(ts - prev_ts),
            gap=bool(gap) or (last is not None and prev_ts != last),
            count=_clean(max(delta.count, 0.0)),
            sum=_clean(delta.sum),
            counts=_clean_counts(delta.counts),
        )
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
        last = self._last
        if last is not None and last[0] == now and last[1] is self.le and last[2] == self.intervals:
            return last[3]  # same intervals (compared by identity first), same bounds, same time
        h = self._histogram(now)
        self._last = (now, self.le, list(self.intervals), h)
        return h

    def _totals(self) -> list[float] | None:
        """Column sums of the counts of every kept interval while all of them are whole (else None),
        updated by the intervals added and dropped since the last call: with whole numbers below
        2**53 every partial sum is exact, so this equals adding them up from scratch in any order."""
        kept, summed = self.intervals, self._summed
        if summed == kept:  # by identity first: nothing changed
            return self._sums
        start = 0  # kept[:k] == summed[-k:]: the first k kept intervals are the newest k summed
        while start < len(summed) and summed[start:] != kept[: len(summed) - start]:
            start += 1
        k = len(summed) - start  # (the summed ones are all whole)
        if len(kept) > _EXACT_INTERVALS or not all(iv.whole for iv in kept[k:]):
            self._summed, self._sums = [], []
            return None
        if k == 0 or len(kept[0].counts) != len(self._sums):
            sums = [0.0] * len(self.le)
            added = kept
        else:
            sums = list(self._sums)
            for iv in summed[:start]:
                sums = list(map(operator.sub, sums, iv.counts))
            added = kept[k:]
        for iv in added:
            sums = list(map(operator.add, sums, iv.counts))
        self._summed, self._sums = list(kept), sums
        return sums

    def _histogram(self, now: float) -> Histogram | None:
        inside = self.inside(now)
        if not inside:
            return None
        sums = self._totals() if len(inside) == len(self.intervals) else None  # inside == every kept interval
        if sums is not None:
            counts = tuple(sums)
        elif len(inside) <= _EXACT_INTERVALS and all(iv.whole for iv in inside):  # exact: add the columns in C
            counts = tuple(map(float, map(sum, zip(*(iv.counts for iv in inside), strict=True))))
        else:
            acc = [0.0] * len(self.le)
            for iv in inside:
                for i, c in enumerate(iv.counts):
                    acc[i] += c
            counts = tuple(acc)
        count = total = 0.0
        for iv in inside:
            count += iv.count
            total += iv.sum
        return Histogram(self.le, counts, count, total)

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
        le = self._le_json
        if le is None or le[0] is not self.le:
            le = self._le_json = (self.le, [_compact(b) for b in self.le])
        return {
            "window_s": _compact(self.window_s),
            "max_intervals": self.max_intervals,
            "le": list(le[1]),
            "intervals": [iv.to_list() for iv in self.intervals],
        }

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
            other.window_s,
            other.max_intervals,
            other.le,
            other.intervals,
        )

    __hash__ = None  # type: ignore[assignment]
