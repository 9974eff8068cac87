"""The rolling event-time window of one latency series: per-interval histogram deltas, packed (pure).

:class:`LatencyWindow` keeps the bucket increases of each collection interval of ONE series and answers the
window's histogram at an event time. It is re-exported by :mod:`tailhound.streams.histograms`.

The intervals are kept as columns: their end times, spans, counts and sums in ``array('d')``, their flags in a
``bytearray`` and every interval's bucket counts in one flat array, of 16- or 32-bit integers while they are
whole numbers (what the agent sends: observation counts), widened as larger or fractional counts arrive. A
node keeps ~7 windows of ~20 intervals: as objects they were ~17 KB a window, as columns ~3 KB
(BENCHMARKS.md, "Latency windows as columns"). :class:`Interval` objects are built on demand
(:attr:`LatencyWindow.intervals`, :meth:`LatencyWindow.inside`).

Cost notes (every vLLM snapshot adds 7 intervals and reads 7 window histograms): whole bucket counts are
added as integers, which is exact, so the result is the same as the interval-by-interval loop of floats
used otherwise (below 2**53); while every kept interval is whole the column sums are kept up to date as
intervals come and go.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import repeat

from tailhound.snapshot import HistogramDelta

from .histograms import Histogram, _clean, _compact

#: Whole counts below this stay exact (below 2**53) when up to _EXACT_INTERVALS intervals are added up.
_EXACT_WHOLE = 2.0**40
_EXACT_INTERVALS = 4096
#: flag bits of an interval: it spans missed collections; one of its bucket counts is not whole
_GAP, _FRACTION = 1, 2
#: the narrowest array type that holds whole counts below each limit ('d' holds every count)
_WIDTHS = (("H", 2**16), ("I", 2**32))


def _whole(values: Sequence[float]) -> bool:
    """Non-negative whole floats below _EXACT_WHOLE (then rounding and summing them are exact)."""
    try:
        return not values or (min(values) >= 0 and max(values) < _EXACT_WHOLE and all(map(float.is_integer, values)))
    except TypeError:  # not all floats
        return False


@dataclass(frozen=True, slots=True)
class Interval:
    """The bucket increases of one collection interval ``(ts - span_s, ts]``; `gap`: it spans missed
    collections. Built on demand from a window's columns (the window does not keep them)."""

    ts: float
    span_s: float
    gap: bool
    count: float
    sum: float
    counts: tuple[float, ...]


def _clean_counts(counts: Sequence[float]) -> tuple[float, ...]:
    """``_clean(max(c, 0.0))`` of every count; for whole non-negative counts that is ``c + 0.0``."""
    if _whole(counts):
        return tuple(map(operator.add, counts, repeat(0.0)))  # + 0.0 turns -0.0 into 0.0, as _clean does
    return tuple(_clean(max(c, 0.0)) for c in counts)


#: bucket bounds and their JSON form, shared by every window with the same bounds (each window had its own)
_BOUNDS: dict[tuple[float, ...], tuple[tuple[float, ...], list]] = {}
_MAX_BOUNDS = 4096


def _bounds(le: tuple[float, ...]) -> tuple[tuple[float, ...], list]:
    """The shared copy of `le` and its JSON form (compact numbers)."""
    found = _BOUNDS.get(le)
    if found is None:
        found = (le, [_compact(b) for b in le])
        if len(_BOUNDS) < _MAX_BOUNDS:
            _BOUNDS[le] = found
    return found


class LatencyWindow:
    """A rolling event-time window of the per-interval histogram deltas of ONE series.

    An interval counts at time `now` when its end ``ts`` lies in ``(now - window_s, now]``; intervals
    that can no longer count (``ts <= newest - window_s``) are dropped, and at most `max_intervals`
    are kept (the oldest go first). Intervals must arrive in event-time order: one not newer than
    the newest kept is a re-delivery and ignored. A change of bucket bounds starts the window over.
    Values are rounded to 6 decimals on the way in, so :meth:`to_dict` / :meth:`from_dict` give back
    exactly the same window (a restored worker computes what the uninterrupted one would).
    """

    __slots__ = (
        "window_s",
        "max_intervals",
        "le",
        "_ts",
        "_span",
        "_count",
        "_sum",
        "_flags",
        "_counts",
        "_fractions",
        "_sums",
    )

    def __init__(self, window_s: float = 300.0, max_intervals: int = 64) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if max_intervals < 1:
            raise ValueError(f"max_intervals must be >= 1, got {max_intervals}")
        self.window_s = float(window_s)
        self.max_intervals = int(max_intervals)
        self._reset(())

    def _reset(self, le: tuple[float, ...]) -> None:
        self.le = le
        self._ts, self._span, self._count, self._sum = array("d"), array("d"), array("d"), array("d")
        self._flags = bytearray()
        self._counts = array("H")  # len(le) per interval
        #: kept intervals with a fractional bucket count
        self._fractions = 0
        #: column sums of every kept interval's counts while all of them are whole (None: not kept), see _totals
        self._sums: array | None = None

    @property
    def last_ts(self) -> float | None:
        return self._ts[-1] if self._ts else None

    @property
    def intervals(self) -> list[Interval]:
        """The kept intervals, oldest first (built on each call)."""
        return [self._interval(i) for i in range(len(self._ts))]

    def _interval(self, i: int) -> Interval:
        nb = len(self.le)
        counts = tuple(map(float, self._counts[i * nb : (i + 1) * nb]))
        return Interval(self._ts[i], self._span[i], bool(self._flags[i] & _GAP), self._count[i], self._sum[i], counts)

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
            self._reset(_bounds(bounds)[0])
            last = None
        counts = _clean_counts(delta.counts)
        self._append(
            ts,
            _clean(ts - prev_ts),
            bool(gap) or (last is not None and prev_ts != last),
            _clean(max(delta.count, 0.0)),
            _clean(delta.sum),
            counts,
        )
        self._prune(ts)
        return True

    def _append(self, ts: float, span: float, gap: bool, count: float, total: float, counts: tuple) -> None:
        """One more interval, newest (its counts as long as the bounds: the caller checked)."""
        whole = _whole(counts)
        flat = self._counts
        if flat.typecode != "d":
            # why: a whole count too large for the array's type, or a fractional one, widens it (never back)
            top = max(counts, default=0.0) if whole else math.inf
            width = next((code for code, limit in _WIDTHS if top < limit), "d")
            if width != flat.typecode and (width == "d" or flat.typecode == "H"):
                flat = self._counts = array(width, flat)
        flat.extend(map(int, counts) if flat.typecode != "d" else counts)
        self._ts.append(ts)
        self._span.append(span)
        self._count.append(count)
        self._sum.append(total)
        self._flags.append((_GAP if gap else 0) | (0 if whole else _FRACTION))
        if not whole:
            self._fractions += 1
            self._sums = None
        elif self._sums is not None:
            self._sums = array("d", map(operator.add, self._sums, counts))

    def _prune(self, newest: float) -> None:
        drop = max(bisect_right(self._ts, newest - self.window_s), len(self._ts) - self.max_intervals)
        if drop <= 0:
            return
        nb = len(self.le)
        if self._sums is not None:  # (then every kept interval is whole: the differences are exact)
            flat = self._counts
            self._sums = array("d", [s - sum(flat[j : drop * nb : nb]) for j, s in enumerate(self._sums)])
        self._fractions -= sum(1 for f in self._flags[:drop] if f & _FRACTION)
        for column in (self._ts, self._span, self._count, self._sum, self._flags):
            del column[:drop]
        del self._counts[: drop * nb]

    def _rows(self, now: float) -> tuple[int, int]:
        """The intervals that count at `now` (end in ``(now - window_s, now]``): indices ``[a, b)``."""
        return bisect_right(self._ts, now - self.window_s), bisect_right(self._ts, now)

    def inside(self, now: float) -> list[Interval]:
        """The intervals that count at `now`: end in ``(now - window_s, now]``."""
        a, b = self._rows(now)
        return [self._interval(i) for i in range(a, b)]

    def _totals(self) -> array | None:
        """Column sums of the counts of every kept interval while all of them are whole (else None); kept
        up to date by _append and _prune once asked for. Whole numbers below 2**53: every partial sum is
        exact, so this equals adding them up in any order."""
        if self._fractions or len(self._ts) > _EXACT_INTERVALS:
            return None
        if self._sums is None:
            nb, flat = len(self.le), self._counts
            self._sums = array("d", [sum(flat[j::nb]) for j in range(nb)])
        return self._sums

    def histogram(self, now: float) -> Histogram | None:
        """All observations of the window at `now` as one histogram; None when no interval is inside. Not
        kept: the worker asks once per window and snapshot (a cache held ~1.5 KB a window for no hit)."""
        a, b = self._rows(now)
        if a >= b:
            return None
        nb, flat = len(self.le), self._counts
        sums = self._totals() if b - a == len(self._ts) else None  # inside == every kept interval
        if sums is not None:
            counts = tuple(sums)
        elif b - a <= _EXACT_INTERVALS and not any(f & _FRACTION for f in self._flags[a:b]):  # exact
            counts = tuple(float(sum(flat[a * nb + j : b * nb : nb])) for j in range(nb))
        else:  # interval by interval, oldest first: the order of the float additions is fixed
            counts = tuple(reduce(operator.add, flat[a * nb + j : b * nb : nb], 0.0) for j in range(nb))
        count = reduce(operator.add, self._count[a:b], 0.0)
        total = reduce(operator.add, self._sum[a:b], 0.0)
        return Histogram(self.le, counts, count, total)

    def quantile(self, q: float, now: float) -> float | None:
        h = self.histogram(now)
        return h.quantile(q) if h is not None else None

    def count(self, now: float) -> float:
        """Observations in the window at `now`."""
        a, b = self._rows(now)
        return sum(self._count[a:b])

    def mean(self, now: float) -> float | None:
        h = self.histogram(now)
        return h.mean() if h is not None else None

    def gaps(self, now: float) -> int:
        """Intervals inside the window at `now` that span missed collections."""
        a, b = self._rows(now)
        return sum(f & _GAP for f in self._flags[a:b])

    def to_dict(self) -> dict:
        """Compact JSON-able state: bounds once, then ``[ts, span_s, gap, count, sum, counts]`` per
        interval, cumulative counts without the trailing ones equal to ``count``."""
        nb, flat, integers = len(self.le), self._counts, self._counts.typecode != "d"
        rows = []
        for i, (ts, span, flags, count, total) in enumerate(
            zip(self._ts, self._span, self._flags, self._count, self._sum, strict=True)
        ):
            k = nb
            while k and flat[i * nb + k - 1] == count:  # implied: the +Inf bucket's count
                k -= 1
            counts = flat[i * nb : i * nb + k]
            if flags & _FRACTION:
                kept = [_compact(c) for c in counts]
            else:
                kept = counts.tolist() if integers else list(map(int, counts))
            rows.append([_compact(ts), _compact(span), flags & _GAP, _compact(count), _compact(total), kept])
        return {
            "window_s": _compact(self.window_s),
            "max_intervals": self.max_intervals,
            "le": list(_bounds(self.le)[1]),
            "intervals": rows,
        }

    @classmethod
    def from_dict(cls, data: dict) -> LatencyWindow:
        window = cls(float(data["window_s"]), int(data["max_intervals"]))
        window._reset(_bounds(tuple(float(b) for b in data["le"]))[0])
        buckets = len(window.le)
        for ts, span, gap, count, total, counts in data["intervals"]:
            values = [float(c) for c in counts]
            if len(values) > buckets:
                raise ValueError(f"interval has {len(values)} bucket counts for {buckets} bounds")
            last = window.last_ts
            if last is not None and not float(ts) > last:
                continue  # why: never written so (add keeps event-time order); an edited record loses only these
            values += [float(count)] * (buckets - len(values))
            window._append(float(ts), float(span), bool(gap), float(count), float(total), tuple(values))
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
