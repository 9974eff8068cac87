"""Long-lived objects out of the garbage collector's way once the worker has warmed up.

A worker's node states, rule caches and model-stage rosters live as long as their nodes, and a full collection
walks all of them though almost none is garbage. :class:`WarmupFreeze` counts the telemetry messages handled and,
after the first :data:`FIRST_FREEZE` and each time the count doubles (the state grows as nodes first report),
collects and freezes what is alive (``gc.freeze``, as ``tailhound ingest`` does after its warm-up); frozen
objects are still freed by reference counting, only cycles among them wait. It stops after :data:`LAST_FREEZE`
messages (more for a worker that may hold more nodes, :func:`last_freeze_for`), and only freezes in a worker
process (:func:`enable`, from :func:`tailhound.streams.app.tune_gc`): the collector is the process's, and an app
made in a test or a tool leaves it alone.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

#: telemetry messages handled before the first freeze (rules loaded, first assignment, the first nodes' state)
FIRST_FREEZE = 2_000
#: no freeze after this many messages (~12 rounds of a 10,000-node fleet's 4 sources, sent one by one), or after
#: MESSAGES_PER_NODE for each node the worker may hold (last_freeze_for)
LAST_FREEZE = 500_000
MESSAGES_PER_NODE = 25

#: young-generation threshold of a worker's (and the standalone ingest's) collector; CPython's default is 700
GC_GEN0_THRESHOLD = 100_000

_enabled = False


def last_freeze_for(max_nodes: int) -> int:
    """The last freeze of a worker holding up to `max_nodes` nodes (``streams.max_nodes``; 0: no cap): its fleet's
    state is built by then (a 100,000-node worker froze only what its first 256,000 messages built under the fixed
    cap, and spent 28 % of its CPU in the collector, BENCHMARKS.md)."""
    return max(LAST_FREEZE, MESSAGES_PER_NODE * max_nodes)


def enable(on: bool = True) -> None:
    """This process is a worker: warm-up freezes may run (`on` False: no longer, e.g. after a benchmark)."""
    global _enabled
    _enabled = on


class WarmupFreeze:
    """Call :meth:`seen` once per handled message; it freezes at `first`, 2 x `first`, 4 x `first` ... <= `last`."""

    def __init__(self, first: int = FIRST_FREEZE, last: int = LAST_FREEZE) -> None:
        self.count = 0
        self.next_at = first
        self.last = last
        #: how many freezes ran, and their wall time in all (the worker logs each)
        self.freezes = 0
        self.seconds = 0.0

    def seen(self, n: int = 1) -> None:
        """`n` more messages handled."""
        self.count += n
        if self.count >= self.next_at and self.next_at <= self.last and _enabled:
            self.freeze()
            while self.next_at <= self.count:  # (a bundle may jump past several thresholds)
                self.next_at *= 2

    def freeze(self) -> None:
        """Collect, then freeze what is alive now."""
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        took = time.perf_counter() - started
        self.freezes += 1
        self.seconds += took
        log.debug("%d objects frozen after %d messages (%.0f ms)", gc.get_freeze_count(), self.count, took * 1e3)
