"""Bounded fleet state: at most so many nodes (and models) are kept, the least recently seen go first.

A worker keeps per node a decoded state, its latest values and a table entry (~12 KB in all), per model an
aggregator and the synthetic node's state. Names come from telemetry, so a sender can make up any number of
them: :class:`RecentNames` keeps them in the order they last arrived and names the ones to evict once more
than ``cap`` are held. The order is *arrival* (processing order), not event time: event time is what a
sender writes (a forged far-future time would keep a made-up name forever), while arrival order is the
worker's own and the same in a replay, so replay and worker evict alike.

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

log = logging.getLogger(__name__)

#: countable kinds of eviction (label ``kind`` of ``tailhound_state_evicted_total``)
NODE = "node"
MODEL = "model"
MODEL_NODE = "model_node"
#: at most one eviction log line per this many seconds (wall time)
LOG_EVERY_S = 60.0


class RecentNames:
    """Names by partition in the order they last arrived; :meth:`touch` says which to evict over the cap."""

    def __init__(self, cap: int | None) -> None:
        #: None or 0: no cap
        self.cap = cap or None
        self._by_part: dict[Hashable, OrderedDict[str, None]] = {}
        self._part: dict[str, Hashable] = {}

    def touch(self, name: str, partition: Hashable = None) -> list[str]:
        """`name` arrived on `partition`: the names of that partition to evict now (oldest first; never `name`)."""
        was = self._part.get(name, partition)
        if was != partition:  # it moved partitions (a replay of files from differently partitioned fleets)
            self.discard(name)
        self._part[name] = partition
        names = self._by_part.setdefault(partition, OrderedDict())
        names[name] = None
        names.move_to_end(name)
        if self.cap is None or len(self._part) <= self.cap:
            return []
        evict: list[str] = []
        for old in names:  # (the oldest of this partition first; `name` is last)
            if len(self._part) - len(evict) <= self.cap or old == name:
                break
            evict.append(old)
        for old in evict:
            self.discard(old)
        return evict

    def adopt(self, names: list[str], partition: Hashable = None) -> None:
        """`names` of `partition` (oldest first) held already but not seen here (a restored table): those not
        known yet go before every name seen since."""
        fresh = [n for n in names if n not in self._part]
        if not fresh:
            return
        held = self._by_part.setdefault(partition, OrderedDict())
        for name in reversed(fresh):
            self._part[name] = partition
            held[name] = None
            held.move_to_end(name, last=False)

    def forget_partitions(self, partitions: set) -> None:
        """The partitions left this worker: their names are not held here any more."""
        for part in partitions & set(self._by_part):
            for name in self._by_part.pop(part):
                self._part.pop(name, None)

    def discard(self, name: str) -> None:
        """Forget `name` (evicted, expired, or its partition moved away)."""
        part = self._part.pop(name, None)
        names = self._by_part.get(part)
        if names is not None:
            names.pop(name, None)
            if not names:
                del self._by_part[part]

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
        log.warning("fleet state over its cap (%s): evicted the least recently seen: %s; an evicted name that "
                    "sends again starts fresh", cap, what)
        self._since.clear()
