"""Bounded fleet state: at most so many nodes (and models) are kept, the least recently seen go first.

A worker keeps per node a decoded state, its latest values and a table entry (~12 KB in all), per model an
aggregator and the synthetic node's state. Names come from telemetry, so a sender can make up any number of
them: :class:`RecentNames` keeps them in the order they last arrived and names the ones to evict once more
than ``cap`` are held, names seen only once first (a flood of made-up names evicts its own). The order is
*arrival* (processing order), not event time: event time is what a sender writes (a forged far-future time
would keep a made-up name forever), while arrival order is the worker's own and depends only on the order
the messages are taken in.

Eviction is per partition: a node's table entry is deleted (a tombstone in its changelog partition, so a
restart does not bring it back) only while a message of that partition is processed, as node expiry does.
An evicted node that sends again starts fresh (no baselines, windows or open incidents: those resolved,
"node gone", when it was evicted). :class:`EvictionLog` logs evictions at most once a minute with counts.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from itertools import islice

log = logging.getLogger(__name__)

#: countable kinds of eviction (label ``kind`` of ``tailhound_state_evicted_total``)
NODE = "node"
MODEL = "model"
MODEL_NODE = "model_node"
#: at most one eviction log line per this many seconds (wall time)
LOG_EVERY_S = 60.0


class RecentNames:
    """Names by partition in the order they last arrived, in two segments: a name seen once is *new*, seen again
    it is *kept*. Over the cap :meth:`touch` evicts the oldest new names of the partition while new names are
    more than a quarter of the cap (a flood of made-up one-shot names churns among itself, the nodes that keep
    sending stay), else the oldest kept ones (a fleet that outgrew the cap: the longest silent node yields).
    An evicted new name is remembered (at most ``cap`` names, no state): if it comes back soon, it is kept, so
    real nodes that join together get in instead of evicting each other."""

    def __init__(self, cap: int | None) -> None:
        #: None or 0: no cap
        self.cap = cap or None
        #: partition -> (new names, kept names), each oldest first
        self._by_part: dict[Hashable, tuple[OrderedDict[str, None], OrderedDict[str, None]]] = {}
        self._part: dict[str, Hashable] = {}
        self._new = 0  # names in the new segments
        self._ghosts: OrderedDict[str, None] = OrderedDict()  # new names evicted lately, oldest first

    def touch(self, name: str, partition: Hashable = None) -> list[str]:
        """`name` arrived on `partition`: the names of that partition to evict now (oldest first; never `name`)."""
        if self._part.get(name, partition) != partition:  # it moved (replayed files of other partitionings)
            self.discard(name)
        new, kept = self._segments(partition)
        if name in kept:
            kept.move_to_end(name)
        elif new.pop(name, 0) is None:  # seen again: kept
            kept[name] = None
            self._new -= 1
        elif self._ghosts.pop(name, 0) is None:  # evicted as new, and back soon: a real node
            kept[name] = None
            self._part[name] = partition
        else:
            new[name] = None
            self._part[name] = partition
            self._new += 1
        if self.cap is None or len(self._part) <= self.cap:
            return []
        over = len(self._part) - self.cap
        first, then = (new, kept) if self._new > self.cap // 4 else (kept, new)
        evict = list(islice((n for n in first if n != name), over))  # (islice: O(evicted), not O(held))
        if len(evict) < over:
            evict += islice((n for n in then if n != name), over - len(evict))
        for old in evict:
            if new.pop(old, 0) is None:
                self._new -= 1
                self._ghosts[old] = None
            self.discard(old)
        while len(self._ghosts) > self.cap:
            self._ghosts.popitem(last=False)
        return evict

    def adopt(self, names: list[str], partition: Hashable = None) -> None:
        """`names` of `partition` (oldest first) held already but not seen here (a restored table): those not
        known yet are kept names older than every name seen since."""
        fresh = [n for n in names if n not in self._part]
        _, kept = self._segments(partition)
        for name in reversed(fresh):
            self._part[name] = partition
            kept[name] = None
            kept.move_to_end(name, last=False)

    def forget_partitions(self, partitions: set) -> None:
        """The partitions left this worker: their names are not held here any more."""
        for part in partitions & set(self._by_part):
            new, kept = self._by_part.pop(part)
            self._new -= len(new)
            for segment in (new, kept):
                for name in segment:
                    self._part.pop(name, None)

    def discard(self, name: str) -> None:
        """Forget `name` (evicted, expired, or its partition moved away)."""
        if name not in self._part:
            return
        part = self._part.pop(name)
        new, kept = self._by_part[part]
        if new.pop(name, 0) is None:
            self._new -= 1
        kept.pop(name, None)
        if not (new or kept):
            del self._by_part[part]

    def _segments(self, partition: Hashable) -> tuple[OrderedDict[str, None], OrderedDict[str, None]]:
        segments = self._by_part.get(partition)
        if segments is None:
            segments = self._by_part[partition] = (OrderedDict(), OrderedDict())
        return segments

    def __contains__(self, name: object) -> bool:
        return name in self._part

    def __len__(self) -> int:
        return len(self._part)


class EvictionLog:
    """Counts evictions by kind and logs them, at most once per :data:`LOG_EVERY_S` (not one line each)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, every_s: float = LOG_EVERY_S) -> None:
        self.total: Counter[str] = Counter()
        self._since: Counter[str] = Counter()
        self._last: dict[str, str] = {}
        self._clock = clock
        self._every_s = every_s
        self._logged_at: float | None = None

    def evicted(self, kind: str, name: str, cap: int | None) -> None:
        self.total[kind] += 1
        self._since[kind] += 1
        self._last[kind] = name
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self._every_s:
            return
        self._logged_at = now
        what = ", ".join(f"{n} {k} (last {self._last[k]!r})" for k, n in sorted(self._since.items()))
        log.warning(
            "fleet state over its cap (%s): evicted the least recently seen: %s; an evicted name that "
            "sends again starts fresh",
            cap,
            what,
        )
        self._since.clear()
