"""Watermarks: per partition, the event time that everything later from that partition will come after.

The roll-up (:mod:`tailhound.streams.rollup.order`) releases an event only once no earlier one can still come;
it learns that from progress markers the stages publish beside their incident events: the node stage's
:class:`PartitionClock` (the oldest latest snapshot time of the partition's active (node, source) pairs) and
the model stage's oldest closed bucket end. A pair silent for :data:`IDLE_S` no longer holds it back; a worker
new to a partition vouches for only :data:`WARMUP_S` until it has watched that long. Memory only: a restarted
worker warms up again (the roll-up's wall-clock bound covers the gap).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping

#: a (node, source) pair silent this long (event time, behind the partition's newest) stops counting
IDLE_S = 300.0
#: the watermark is recomputed (and published when it moved) once the partition's newest time moved this far
EVERY_S = 5.0
#: event time a partition is observed after its assignment before its watermark is published
WARMUP_S = 60.0


class PartitionClock:
    """The node stage's per-partition watermarks (see the module docstring)."""

    def __init__(self, idle_s: float = IDLE_S, every_s: float = EVERY_S, warmup_s: float = WARMUP_S) -> None:
        self.idle_s = idle_s
        self.every_s = every_s
        self.warmup_s = warmup_s
        self._last: dict[int, dict[tuple[str, str], float]] = {}
        self._newest: dict[int, float] = {}
        self._first: dict[int, float] = {}
        self._checked: dict[int, float] = {}
        self._published: dict[int, float] = {}

    def observe(self, partition: int, node: str, source: str, ts: float) -> float | None:
        """An accepted snapshot of `node`/`source` at `ts` on `partition`; the partition's new watermark when
        it is due to be published (it moved forward), else None."""
        last = self._last.setdefault(partition, {})
        key = (node, source)
        if ts > last.get(key, float("-inf")):
            last[key] = ts
        newest = self._newest[partition] = max(self._newest.get(partition, ts), ts)
        first = self._first.get(partition)
        if first is None:  # the partition's first snapshot here: hold the roll-up back until it warmed up
            self._first[partition] = ts
            self._published[partition] = hold = ts - self.warmup_s
            return hold
        if newest - first < self.warmup_s or newest - self._checked.get(partition, float("-inf")) < self.every_s:
            return None
        self._checked[partition] = newest
        horizon = newest - self.idle_s
        for stale in [k for k, t in last.items() if t < horizon]:
            del last[stale]  # bounded by the active pairs of the partition
        mark = min(last.values())
        if mark <= self._published.get(partition, float("-inf")):
            return None
        self._published[partition] = mark
        return mark

    def forget(self, partitions: Iterable[int]) -> None:
        """The partitions left this worker: their watermarks start over (with a warm-up) if they come back."""
        for p in partitions:
            for d in (self._last, self._newest, self._first, self._checked, self._published):
                d.pop(p, None)

    def partitions(self) -> set[int]:
        return set(self._last)


class OldestLatest:
    """The oldest of each member's latest time among the members still active, without walking them all: a heap
    of (time, member) entries, pushed on every update, whose outdated entries (the member moved on, or is gone)
    are dropped when they come to the top. A member found inactive at the top leaves the heap until its next
    update: activity only ends with time (event time and wall time move forward), so it cannot come back alone.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []

    def push(self, member: str, ts: float, latest: Mapping[str, float]) -> None:
        """`member`'s latest time is now `ts` (`latest`: every member's, for compaction)."""
        heapq.heappush(self._heap, (ts, member))
        if len(self._heap) > 2 * len(latest) + 64:  # mostly outdated entries: start from the members' own times
            self.rebuild(latest)

    def rebuild(self, latest: Mapping[str, float]) -> None:
        self._heap = [(t, m) for m, t in latest.items()]
        heapq.heapify(self._heap)

    def oldest(self, latest: Mapping[str, float], active: Callable[[str, float], bool]) -> float | None:
        """The smallest `latest` time of the members `active` says still count; None when none does."""
        heap = self._heap
        while heap:
            ts, member = heap[0]
            if latest.get(member) == ts and active(member, ts):
                return ts
            heapq.heappop(heap)  # outdated, or inactive until its next update (push)
        return None
