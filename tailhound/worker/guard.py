"""What keeps a streams worker (``tailhound worker``) going through broker trouble, and stops it on time.

- **Lost topics**: every :data:`TOPIC_CHECK_S` the worker's own topics that are gone (the bundled broker keeps
  everything in memory) are declared again; the worker keeps the table state it holds in memory.
- **Offsets past the log**: :func:`reset_offsets_past_log_end` reads lost topics' partitions (and any whose
  committed offset lies beyond its log end) from the start, so no recreated topic's first messages are skipped.
- **Sends into lost topics**: :func:`retry_unknown_produce_errors` has aiokafka retry the bundled broker's
  error -1 like an unknown topic, so an incident event is not dropped while the topic comes back.
- **Commit errors**: :func:`bound_commit_retries` makes a commit stuck for :data:`COMMIT_RETRY_S` raise, so the
  worker exits for its supervisor to restart it (it recovers its tables from the changelogs).
- **Stopping on time**: :func:`stop_within` ends a graceful stop that takes over :data:`SHUTDOWN_GRACE_S`
  (status 1); offsets not committed are processed again, which incident ids and sequences make harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from typing import Any

import faust
from aiokafka.errors import KafkaError

from tailhound.kafka import ensure_topics, existing_topics, topic_specs
from tailhound.settings import Settings
from tailhound.worker.lost_logs import LOST, check_before_seek, void_offsets

log = logging.getLogger("tailhound.worker.compose")

#: how often the worker checks that its topics still exist
TOPIC_CHECK_S = 2.0
#: how long one offset commit may keep failing before the worker gives up (and exits non-zero). Longer than
#: the broker outages the worker rides out (a 30 s pause in the fault drills).
COMMIT_RETRY_S = 60.0
#: how long a graceful stop may take after SIGINT/SIGTERM before the process exits anyway
SHUTDOWN_GRACE_S = 3.0
#: the status of a worker that did not stop gracefully within SHUTDOWN_GRACE_S
EXIT_NOT_CLEAN = 1


def guard_topics(app: faust.App, settings: Settings, interval_s: float = TOPIC_CHECK_S) -> None:
    """Add the task that declares the worker's topics again when they are gone (module docstring)."""

    async def check() -> list[str]:
        return await check_topics(app, settings)

    LOST.check = check  # the seek at an assignment checks first (tailhound.worker.lost_logs)

    @app.task
    async def topic_guard() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await check_topics(app, settings)
            except Exception as exc:  # a failed check is tried again; it never stops the worker
                log.debug("topic check failed: %r", exc)


def _internal_topics(app: faust.App) -> dict[str, Any]:
    """Faust's own topics (changelogs, the leader topic) by name, with the channel that declares each."""
    out: dict[str, Any] = {}
    for channel in list(app.topics):
        if getattr(channel, "internal", False):
            for name in channel.topics:
                out[name] = channel
    return out


async def check_topics(app: faust.App, settings: Settings, timeout_s: float = 10.0) -> list[str]:
    """Declare the worker's topics that the broker does not have; returns their names ([] when none is gone).

    Raises when the broker does not answer within `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        existing = await existing_topics(settings)
        internal = _internal_topics(app)
        missing = LOST.observe(existing, set(topic_specs(settings)) | set(internal), internal)
        if not missing:
            return []
        log.warning(
            "the broker lost topic(s) %s (restarted without its data, or deleted): declaring them again; "
            "state kept in this worker's memory stays, but their old messages and the committed offsets "
            "are gone",
            ", ".join(missing),
        )
        await ensure_topics(settings)
        for name in missing:
            channel = internal.get(name)
            if channel is not None:
                await channel.declare()
        return missing


def bound_commit_retries(limit_s: float = COMMIT_RETRY_S) -> None:
    """Make aiokafka's offset commits (every consumer of this process) give up after `limit_s` of retries.

    aiokafka's ``GroupCoordinator.commit_offsets`` retries a retriable error (an unknown topic, no
    coordinator) without end; after `limit_s` this raises ``KafkaError`` instead, which Faust turns into a
    crash (the worker exits non-zero; see the module docstring). Idempotent."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    original = GroupCoordinator.commit_offsets
    if getattr(original, "tailhound_bounded", False):
        return

    async def commit_offsets(self: GroupCoordinator, assignment: Any, offsets: Any) -> None:
        try:
            async with asyncio.timeout(limit_s):
                await original(self, assignment, offsets)
        except TimeoutError:
            log.error(
                "an offset commit kept failing for %.0f s; giving up (the worker exits for its supervisor "
                "to start it again)",
                limit_s,
            )
            raise KafkaError(f"offset commit did not succeed within {limit_s:.0f} s") from None

    commit_offsets.tailhound_bounded = True  # type: ignore[attr-defined]
    GroupCoordinator.commit_offsets = commit_offsets  # type: ignore[method-assign]


def reset_offsets_past_log_end() -> None:
    """Make aiokafka's ``seek_to_committed`` (what Faust calls after every assignment) read from the beginning
    instead a partition of a topic the broker lost, or whose committed offset lies beyond its log end (module
    docstring). Idempotent."""
    from aiokafka import AIOKafkaConsumer

    original = AIOKafkaConsumer.seek_to_committed
    if getattr(original, "tailhound_checked", False):
        return

    async def seek_to_committed(self: AIOKafkaConsumer, *partitions: Any) -> dict:
        committed = await original(self, *partitions)
        await check_before_seek()
        void = set(void_offsets(committed))
        LOST.read_from_start(void)
        ahead = [tp for tp, offset in committed.items() if offset is not None and offset > 0 and tp not in void]
        try:
            ends = await self.end_offsets(ahead) if ahead else {}
            lost = [*void, *(tp for tp in ahead if committed[tp] > ends.get(tp, committed[tp]))]
            starts = await self.beginning_offsets(lost) if lost else {}
        except KafkaError as exc:  # the broker did not answer: keep the committed offsets, but not the void ones
            log.debug("could not check the committed offsets against the log ends: %r", exc)
            lost, ends, starts = list(void), {}, {}
        for tp in lost:
            if tp in void:
                log.warning(
                    "%s: the broker lost this topic's log (restarted without its data, or deleted): "
                    "committed offset %d points into the old one; reading it from offset %d",
                    tp,
                    committed[tp],
                    starts.get(tp, 0),
                )
            else:
                log.warning(
                    "%s: committed offset %d is beyond the log end %d (the broker lost the log: restarted "
                    "without its data, or the topic was recreated); reading it from offset %d",
                    tp,
                    committed[tp],
                    ends[tp],
                    starts.get(tp, 0),
                )
            self.seek(tp, starts.get(tp, 0))
            committed[tp] = starts.get(tp, 0)
        return committed

    seek_to_committed.tailhound_checked = True  # type: ignore[attr-defined]
    AIOKafkaConsumer.seek_to_committed = seek_to_committed  # type: ignore[method-assign]


def retry_unknown_produce_errors() -> None:
    """Make aiokafka retry a send answered with error -1 (UNKNOWN), after refreshing its metadata, as it does for
    an unknown topic (module docstring); bounded by the batch's expiry (the producer's request timeout). For the
    worker process only: it flips the class attributes of ``aiokafka.errors.UnknownError``. Idempotent."""
    from aiokafka.errors import UnknownError

    UnknownError.retriable = True
    UnknownError.invalid_metadata = True


def _exit_now(grace_s: float) -> None:
    with contextlib.suppress(Exception):
        log.error(
            "the worker did not stop within %.1f s of the signal; exiting now (offsets not yet committed "
            "are processed again by the next worker)",
            grace_s,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
    os._exit(EXIT_NOT_CLEAN)


def stop_within(worker: faust.Worker, grace_s: float = SHUTDOWN_GRACE_S) -> None:
    """End the process `grace_s` after SIGINT/SIGTERM (or a crash) if Faust's graceful stop has not by then."""
    armed: list[threading.Timer] = []

    def arm() -> None:
        if not armed:
            timer = threading.Timer(grace_s, _exit_now, args=(grace_s,))
            timer.daemon = True
            timer.start()
            armed.append(timer)

    schedule_shutdown = worker._schedule_shutdown
    on_worker_shutdown = worker.on_worker_shutdown

    def _schedule_shutdown(sig: Any) -> None:
        arm()
        schedule_shutdown(sig)

    def _on_worker_shutdown() -> None:
        arm()
        on_worker_shutdown()

    async def _sentinel_task() -> None:  # mode sleeps a whole second here before it closes the loop
        await asyncio.sleep(0)

    worker._schedule_shutdown = _schedule_shutdown  # type: ignore[method-assign]
    worker.on_worker_shutdown = _on_worker_shutdown  # type: ignore[method-assign]
    worker._sentinel_task = _sentinel_task  # type: ignore[method-assign]
