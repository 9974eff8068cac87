"""Rolling robust baseline of one series, in event time, small enough for a changelogged Faust table.

Bucket layout (defaults): the horizon (4 h) is cut into fixed buckets (300 s, aligned to the epoch, so
``bucket = floor(ts / 300)``). A closed bucket is summarised by ONE number, the median of the values
learned in it, kept in a ring of ``horizon_s / bucket_s`` = 48 float32 slots (NaN = nothing learned:
no data, or the series was inside an incident). The bucket being filled keeps its raw values (at most
``MAX_RAW`` = 32; past that it keeps every 2nd, 4th, ... value, a deterministic uniform thinning, so
a 1 s cadence costs the same as a 10 s one). ``expected()`` is computed over the closed buckets only,
so the window an operator compares ("P95 over the last 5 minutes") is never part of its own baseline:

- ``median``: median of the bucket medians (robust to up to half the buckets being odd);
- ``mad``: median absolute deviation of the bucket medians from that median (unscaled);
- ``p90``: 90th percentile of the bucket medians (linear interpolation), the "busy but normal" level.

Values are rounded to 4 significant digits (0.1 %) when learned, so the state serialises exactly and a
``from_dict(to_dict())`` round trip reproduces ``expected()`` bit for bit.

Incidents: a value observed with ``in_incident=True`` is not learned, and the raw values of the bucket
being filled are dropped (they are the onset that made the rule go pending), so an incident never
raises its own baseline. Event time only: ``ts`` comes from snapshots; a ``ts`` not newer than the
newest one seen (a duplicate or a late delivery) is ignored, which also ignores everything older than
the newest bucket's start.

Daily load swings: a 4 h window of 5-minute medians follows the level of the last hours; a daily
ramp (say 30 % -> 80 % load over 3 h) lifts the median with a lag of about half the horizon. Keeping
a week of the day's shape would need 7 x 24 hourly medians (~1.3 KB of JSON, over the 1 KB budget),
so it is not kept here: latency signals get their load dependence from :mod:`tailhound.streams.loadmodel`
("2x what this load should cost"), and the rolling baseline is the fallback when no load model
applies. Ratios against a rolling baseline during a ramp are therefore conservative only after the
ramp has lasted ~2 h; rules should pair them with an absolute condition, as the playbook does.

Memory (``bench_memory``: full ring + a full 10 s-cadence current bucket, ``python -m tailhound.streams.baseline``):
767 B per series in memory at 10k series and 797 B at 100k (tracemalloc: the baseline, 576 B of it,
plus the store's key and dict entry), 628 B serialised (compact JSON); worst case (tiny negative
values, every slot used) ~0.75 KB serialised.
"""

from __future__ import annotations

import json
import math
import sys
import tracemalloc
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_HORIZON_S = 4 * 3600.0
DEFAULT_BUCKET_S = 300.0
DEFAULT_WARMUP_S = 1200.0
#: ``ratio()`` divides by ``max(median, median_floor)``; 1e-3 is 1 ms for latencies, 0.1 % for utilisations.
DEFAULT_MEDIAN_FLOOR = 1e-3
MAX_RAW = 32
STATE_VERSION = 1
_NAN = float("nan")


def _round(value: float) -> float:
    return float(f"{value:.4g}")


#: _round of the float32 values a baseline keeps (each is written again at every state write until its
#: bucket closes): a memo of a pure function, bounded
_ROUNDED: dict[float, float] = {}


def _round_kept(value: float) -> float:
    """:func:`_round`, memoised (zeros are not: 0.0 and -0.0 are one key but round differently)."""
    found = _ROUNDED.get(value)
    if found is None or not value:
        if len(_ROUNDED) >= 65536:
            _ROUNDED.clear()
        found = _ROUNDED[value] = _round(value)
    return found


def _written(value: float) -> float:
    """A bucket median as the ring writes it: its float32 value, rounded (`value` itself when it was
    rounded and float32 holds it, i.e. outside float32's subnormal and overflow ranges)."""
    kept = array("f", [value])[0]
    return kept if not math.isfinite(kept) else _round(kept)


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Expected:
    """What the series normally is, over the closed buckets of the horizon."""

    median: float
    mad: float
    p90: float
    n_buckets: int


class RollingBaseline:
    __slots__ = (
        "bucket_s",
        "warmup_s",
        "median_floor",
        "_ring",
        "_cur",
        "_last_ts",
        "_raw",
        "_seen",
        "_stride",
        "_expected",
    )

    def __init__(
        self,
        horizon_s: float = DEFAULT_HORIZON_S,
        bucket_s: float = DEFAULT_BUCKET_S,
        warmup_s: float = DEFAULT_WARMUP_S,
        median_floor: float = DEFAULT_MEDIAN_FLOOR,
    ) -> None:
        if bucket_s <= 0 or horizon_s < bucket_s:
            raise ValueError("need 0 < bucket_s <= horizon_s")
        if warmup_s > horizon_s - bucket_s:
            raise ValueError("warmup_s must fit in the horizon minus one bucket")
        self.bucket_s = float(bucket_s)
        self.warmup_s = float(warmup_s)
        self.median_floor = float(median_floor)
        #: the bucket medians as written (what to_dict writes: float32 values, rounded); expected() reads their
        #: float32 values. Kept so, to_dict needs no memo of the written form (1.6 KB a baseline)
        self._ring = array("d", [_NAN]) * int(horizon_s // bucket_s)
        self._cur: int | None = None  # index of the bucket being filled
        self._last_ts = -math.inf
        self._raw = array("f")
        self._seen = 0  # values offered to the current bucket (for thinning)
        self._stride = 1
        self._forget_ring()

    def _forget_ring(self) -> None:
        """Drop what is derived from the ring (it changes only when a bucket closes, every bucket_s)."""
        self._expected: Expected | None | bool = False  # False: not computed

    @property
    def horizon_s(self) -> float:
        return len(self._ring) * self.bucket_s

    def observe(self, ts: float, value: float, in_incident: bool = False) -> bool:
        """Learn ``value`` at event time ``ts``; returns False when the observation was ignored."""
        if ts <= self._last_ts or not math.isfinite(value):
            return False
        self._last_ts = ts
        self._advance(int(ts // self.bucket_s))
        if in_incident:
            self._raw = array("f")
            return False
        self._seen += 1
        if (self._seen - 1) % self._stride:
            return True
        self._raw.append(_round(value))
        if len(self._raw) > MAX_RAW:
            self._raw = self._raw[::2]
            self._stride *= 2
        return True

    def _advance(self, index: int) -> None:
        if self._cur is None:
            self._cur = index
            return
        if index == self._cur:
            return
        n = len(self._ring)
        self._forget_ring()
        self._ring[self._cur % n] = _written(_round(_median(list(self._raw)))) if self._raw else _NAN
        for skipped in range(self._cur + 1, min(index, self._cur + n) + 1):
            self._ring[skipped % n] = _NAN  # buckets with no data, and the new one
        self._cur = index
        self._raw = array("f")
        self._seen = 0
        self._stride = 1

    def bucket_medians(self) -> list[float]:
        return [v for v in array("f", self._ring) if not math.isnan(v)]

    def expected(self) -> Expected | None:
        """The baseline, or None before ``warmup_s`` of learned (closed) buckets (computed once per ring)."""
        if self._expected is False:
            self._expected = self._compute_expected()
        return self._expected  # type: ignore[return-value]

    def _compute_expected(self) -> Expected | None:
        medians = sorted(self.bucket_medians())
        if not medians or len(medians) * self.bucket_s < self.warmup_s:
            return None
        median = _median(medians)
        mad = _median([abs(m - median) for m in medians])
        return Expected(
            median=_round(median), mad=_round(mad), p90=_round(_quantile(medians, 0.9)), n_buckets=len(medians)
        )

    def ratio(self, value: float) -> float | None:
        """``value / median``; the median is floored at ``median_floor`` so a series near 0 is not inf."""
        exp = self.expected()
        if exp is None:
            return None
        return value / max(exp.median, self.median_floor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "b": self.bucket_s,
            "w": self.warmup_s,
            "f": self.median_floor,
            "i": self._cur,
            "t": self._last_ts if math.isfinite(self._last_ts) else None,
            "r": [None if x != x else x for x in self._ring],  # (x != x: NaN)
            "c": [_round_kept(x) for x in self._raw],
            "n": self._seen,
            "s": self._stride,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RollingBaseline:
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"unsupported baseline state version {data.get('v')!r}")
        ring = data["r"]
        self = cls(horizon_s=len(ring) * data["b"], bucket_s=data["b"], warmup_s=data["w"], median_floor=data["f"])
        # (the values as to_dict wrote them; expected() reads their float32 values, as it always did)
        self._ring = array("d", [_NAN if x is None else x for x in ring])
        self._cur = data["i"]
        self._last_ts = -math.inf if data["t"] is None else data["t"]
        self._raw = array("f", data["c"])
        self._seen = data["n"]
        self._stride = data["s"]
        self._forget_ring()
        return self

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def nbytes(self) -> int:
        """Size of the serialised state (compact JSON), what the changelog carries per update."""
        return len(self.to_json().encode())


SeriesKey = tuple[str, str]  # (signal, entity)


class BaselineStore:
    """One baseline per (signal, entity), least recently observed evicted beyond ``max_series``."""

    def __init__(self, max_series: int = 100_000, **baseline_kwargs: Any) -> None:
        self.max_series = max_series
        self.baseline_kwargs = baseline_kwargs
        self._series: OrderedDict[SeriesKey, RollingBaseline] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._series)

    def __contains__(self, key: SeriesKey) -> bool:
        return key in self._series

    def get(self, signal: str, entity: str) -> RollingBaseline | None:
        return self._series.get((signal, entity))

    def put(self, signal: str, entity: str, baseline: RollingBaseline) -> None:
        self._series[(signal, entity)] = baseline
        self._series.move_to_end((signal, entity))
        while len(self._series) > self.max_series:
            self._series.popitem(last=False)
            self.evicted += 1

    def observe(self, signal: str, entity: str, ts: float, value: float, in_incident: bool = False) -> bool:
        key = (signal, entity)
        baseline = self._series.get(key)
        if baseline is None:
            baseline = RollingBaseline(**self.baseline_kwargs)
        self.put(signal, entity, baseline)
        return baseline.observe(ts, value, in_incident)

    def expected(self, signal: str, entity: str) -> Expected | None:
        baseline = self._series.get((signal, entity))
        return baseline.expected() if baseline else None

    def state_bytes(self) -> int:
        """Total serialised size of every series (what a full changelog compaction would hold)."""
        return sum(b.nbytes() for b in self._series.values())


def _warm_template(points_per_bucket: int = 30) -> dict[str, Any]:
    """A series with a full ring and a full current bucket (10 s cadence), the largest usual state."""
    b = RollingBaseline()
    step = DEFAULT_BUCKET_S / points_per_bucket
    start = 5_666_700 * DEFAULT_BUCKET_S  # bucket-aligned, ~2023-11
    for k in range(len(b._ring) * points_per_bucket):
        b.observe(start + k * step, 0.2 + 0.05 * math.sin(k / 97.0) + 0.001 * (k % 7))
    return b.to_dict()


def bench_memory(n_series: int) -> dict[str, float]:
    """Bytes per series of a full store: in memory (tracemalloc, baselines and store keys) and serialised."""
    template = _warm_template()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = BaselineStore(max_series=n_series)
        for i in range(n_series):
            state = dict(template, r=[None if x is None else x + (i % 1000) * 1e-4 for x in template["r"]])
            store.put("latency.tpot.p95", f"engine-{i}", RollingBaseline.from_dict(state))
        in_memory = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    baselines_only = sum(_baseline_object_bytes(b) for b in store._series.values()) / n_series
    return {
        "n_series": n_series,
        "in_memory_bytes_per_series": in_memory / n_series,
        "baseline_object_bytes_per_series": baselines_only,
        "serialized_bytes_per_series": store.state_bytes() / n_series,
    }


def _baseline_object_bytes(b: RollingBaseline) -> int:
    return sys.getsizeof(b) + sys.getsizeof(b._ring) + sys.getsizeof(b._raw)


if __name__ == "__main__":  # python -m tailhound.streams.baseline
    for n in (10_000, 100_000):
        print(bench_memory(n))
