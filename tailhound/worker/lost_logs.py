"""Offsets into logs the broker lost: after a broker lost its data (the bundled broker keeps it in memory), the
worker's committed offsets are positions in logs that no longer exist and must not be used to read the new ones
(a seek there would skip snapshots unseen, so a fault starting in between would open no incident).

:class:`LostLogs` remembers which of the worker's topics the broker lost (found by
:func:`tailhound.worker.guard.check_topics`, which runs at every assignment, before the seek; a lost changelog
means every offset is void). Until those partitions are read from the start, no commit carries their offsets
(:func:`drop_commits_into_lost_logs`), and a lost changelog is not recovered (:func:`skip_recovery_of_lost_changelogs`:
the worker's memory holds the table; Faust would wait on it for ever). Limit: a worker that finds the topics
already declared again by another learns of the loss only from the log-end check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

log = logging.getLogger("tailhound.worker")

#: how long the topic check at an assignment may take before the seek goes on without it
CHECK_AT_SEEK_S = 10.0
#: the recovery offset of a lost changelog: past any end, so Faust has nothing to read back
UP_TO_DATE = 1 << 62


class LostLogs:
    """The worker's topics the broker lost since the last assignment (see the module docstring)."""

    def __init__(self) -> None:
        #: topics seen on the broker at a check (a topic never seen cannot have been lost)
        self.present: set[str] = set()
        #: lost topics whose offsets are void until the next assignment reads them from the start
        self.void: set[str] = set()
        #: a table changelog was lost: the broker lost everything, every offset is void
        self.everything = False
        #: partitions read from their start since the loss whose group offset is still the old one (until this
        #: worker commits them): a second seek of the same assignment must not trust it either
        self.rereading: set = set()
        #: the worker's topic check (declares lost topics again and calls :meth:`observe`); None: no worker
        self.check: Callable[[], Awaitable[Any]] | None = None

    def observe(self, existing: Iterable[str], wanted: Iterable[str], internal: Iterable[str]) -> list[str]:
        """One topic check: `wanted` (the worker's topics, `internal` among them) against the broker's
        `existing` ones; returns the missing ones, sorted."""
        have, want = set(existing), set(wanted)
        missing = want - have
        lost = missing & self.present
        self.present = (self.present | (want & have)) - missing
        if lost:
            self.void |= lost
            if lost & set(internal):  # nobody deletes a changelog by hand: the broker lost its data
                self.everything = True
        return sorted(missing)

    def voids(self, topic: str) -> bool:
        return self.everything or topic in self.void

    def pending(self) -> bool:
        return self.everything or bool(self.void)

    def read_from_start(self, partitions: Iterable = ()) -> None:
        """The assignment read the void `partitions` from their beginning: offsets count again, once this
        worker committed those partitions."""
        self.void.clear()
        self.everything = False
        self.rereading |= set(partitions)

    def committed(self, partitions: Iterable) -> None:
        """This worker committed `partitions`: the group's offsets for them are from the new logs."""
        self.rereading -= set(partitions)


#: the worker process's record (one Faust app per process)
LOST = LostLogs()


async def check_before_seek(lost: LostLogs = LOST) -> None:
    """Run the worker's topic check now, so a loss the periodic check has not seen yet counts for this seek."""
    if lost.check is None:
        return
    try:
        async with asyncio.timeout(CHECK_AT_SEEK_S):
            await lost.check()
    except Exception as exc:  # the seek goes on with what is known (and the log-end check)
        log.debug("topic check at the assignment failed: %r", exc)


def void_offsets(committed: dict, lost: LostLogs = LOST) -> list:
    """The partitions of `committed` (partition -> committed offset) whose offsets point into lost logs."""
    return [
        tp
        for tp, offset in committed.items()
        if offset is not None and offset > 0 and (lost.voids(tp.topic) or tp in lost.rereading)
    ]


def drop_commits_into_lost_logs(lost: LostLogs = LOST) -> None:
    """Make aiokafka's offset commits leave out the partitions of lost logs until the next assignment, and drop a
    commit the broker answers with an unknown topic (module docstring). Idempotent."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from aiokafka.errors import UnknownTopicOrPartitionError

    original = GroupCoordinator._do_commit_offsets
    if getattr(original, "tailhound_lost_logs", False):
        return

    async def _do_commit_offsets(self: GroupCoordinator, assignment: Any, offsets: dict) -> None:
        if lost.pending():
            kept = {tp: o for tp, o in offsets.items() if not lost.voids(tp.topic)}
            if len(kept) < len(offsets):
                log.info(
                    "offset commit: left out %d partition(s) of logs the broker lost (their offsets point "
                    "into the old logs)",
                    len(offsets) - len(kept),
                )
            offsets = kept
        try:
            await original(self, assignment, offsets)
            lost.committed(offsets)
        except UnknownTopicOrPartitionError:
            log.warning(
                "offset commit dropped: the broker no longer has a topic it covers (restarted without "
                "its data, or deleted); those messages are read again"
            )

    _do_commit_offsets.tailhound_lost_logs = True  # type: ignore[attr-defined]
    GroupCoordinator._do_commit_offsets = _do_commit_offsets  # type: ignore[method-assign]


def skip_recovery_of_lost_changelogs(lost: LostLogs = LOST) -> None:
    """Make Faust's table recovery count a changelog partition of a lost topic as read to its end (module
    docstring): its offset is set past any end when the assignment adds it. Idempotent."""
    from faust.tables.recovery import Recovery

    original = Recovery._add
    if getattr(original, "tailhound_lost_logs", False):
        return

    def _add(self: Recovery, table: Any, tp: Any, offsets: Any) -> None:
        original(self, table, tp, offsets)
        if lost.voids(tp.topic):
            log.warning(
                "%s: the broker lost this table changelog; the table in this worker's memory is kept and "
                "the new log is not read back",
                tp,
            )
            offsets[tp] = UP_TO_DATE

    _add.tailhound_lost_logs = True  # type: ignore[attr-defined]
    Recovery._add = _add  # type: ignore[method-assign]
