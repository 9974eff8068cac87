"""What the worker lets in, and when it forgets a node. A snapshot's ``ts`` is its producer's clock, so no
message may move a node's clock far: :class:`TimeBounds` rejects one too far ahead of its arrival (or, when
asked, too old), :class:`Progression` does the same offline against a recording's own progression; every
rejection becomes a dead letter with its reason (:class:`DeadLetters`) and is counted (:mod:`.intake_stats`).
:class:`NodeExpiry` expires a node silent for ``streams.node_expiry_s`` of its partition's event time, so a
fleet that churns does not grow the worker's memory.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tailhound.deadletter import MAX_KEY, DeadLetter
from tailhound.snapshot import LIMITS, Snapshot, entity_problem
from tailhound.wire.v3_decode import LayoutCache

from .codec import Malformed, Parts, decode_message, decode_snapshot
from .intake_stats import IntakeStats

T = TypeVar("T")
log = logging.getLogger(__name__)

#: rejection reasons (the ``reason`` label of the counter), besides the decoder's (see codec.rejection_kind)
FUTURE_TS = "future_ts"
TOO_OLD = "too_old"
WRONG_KEY = "wrong_key"
EVALUATE_FAILED = "evaluate_failed"
MODEL_STAGE_FAILED = "model_stage_failed"
NOT_AN_INCIDENT = "not_an_incident"


def _iso(ts: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f}"


@dataclass(frozen=True)
class Rejection:
    kind: str  # countable reason (FUTURE_TS, TOO_OLD, ...)
    reason: str  # for people (the dead letter's reason)
    stage: str = "time"


@dataclass(frozen=True)
class TimeBounds:
    """How far a snapshot's event time may be from its arrival (settings ``streams.max_future_skew_s`` and
    ``streams.max_age_s``; None: no bound into the past)."""

    max_future_skew_s: float = 300.0
    max_age_s: float | None = None

    def check(self, ts: float, arrival: float, sent_at: float | None = None) -> Rejection | None:
        """None when `ts` is within bounds. `arrival`: when the worker took the message (wall clock; offline
        the recording's progression); `sent_at`: when it was produced (the Kafka message timestamp), which
        only the bound into the past uses, and never when it is later than `arrival`."""
        if ts > arrival + self.max_future_skew_s:
            return Rejection(
                FUTURE_TS,
                f"event time {_iso(ts)} is {ts - arrival:.0f} s ahead of its arrival at "
                f"{_iso(arrival)}; at most {self.max_future_skew_s:g} s are accepted (settings "
                "streams.max_future_skew_s): the producer's clock is wrong",
            )
        if self.max_age_s is not None:
            since = min(sent_at, arrival) if sent_at is not None and sent_at > 0 else arrival
            if ts < since - self.max_age_s:
                return Rejection(
                    TOO_OLD,
                    f"event time {_iso(ts)} is {since - ts:.0f} s before the message was "
                    f"sent at {_iso(since)}; at most {self.max_age_s:g} s are accepted (settings "
                    "streams.max_age_s)",
                )
        return None

    def horizon(self, arrival: float) -> float:
        """The latest event time accepted at `arrival`."""
        return arrival + self.max_future_skew_s


class Gate:
    """The worker's intake of one telemetry message: the bytes decode into a snapshot within the limits
    (:func:`tailhound.streams.codec.decode_snapshot`), keyed by its node, dated within `bounds` of its
    arrival; else a :class:`Rejection` (counted in `stats`) for the dead-letter topic."""

    def __init__(
        self,
        bounds: TimeBounds | None = None,
        max_message_bytes: int | None = LIMITS.max_message_bytes,
        stats: IntakeStats | None = None,
        layouts: LayoutCache | None = None,
    ) -> None:
        self.bounds = bounds or TimeBounds()
        self.max_message_bytes = max_message_bytes
        self.stats = stats if stats is not None else IntakeStats()
        #: the version-3 layouts read in full, for the messages that reference them (publish.layout_every_s;
        #: the worker's also live in its layouts table, tailhound.streams.layout_store)
        self.layouts = layouts if layouts is not None else LayoutCache()

    def admit(
        self, raw: bytes | None, key: bytes | None, arrival: float, sent_at: float | None = None
    ) -> Snapshot | Rejection:
        value = decode_snapshot(raw, max_bytes=self.max_message_bytes)
        if isinstance(value, Malformed):
            return self._reject(Rejection(value.kind, value.reason, value.stage))
        if key != value.key():
            shown = key if key is None or len(key) <= 200 else key[:200] + b"..."
            return self._reject(
                Rejection(
                    WRONG_KEY,
                    f"message key {shown!r} must be the snapshot's node "
                    f"{value.node!r} (telemetry is partitioned by node)",
                    "key",
                )
            )
        rejected = self.bounds.check(value.ts, arrival, sent_at) or entities(value)
        if rejected is not None:
            return self._reject(rejected)
        return value

    def admit_all(
        self, raw: bytes | None, key: bytes | None, arrival: float, sent_at: float | None = None
    ) -> Parts | Rejection:
        """:meth:`admit` for a message of either version (:func:`tailhound.streams.codec.decode_message`): its
        snapshots in order (one, or a bundle's parts), or the rejection of the whole message."""
        values = self._admit_all(raw, key, arrival, sent_at)
        self.layouts.settle(not isinstance(values, Rejection))
        return values

    def _admit_all(
        self, raw: bytes | None, key: bytes | None, arrival: float, sent_at: float | None
    ) -> Parts | Rejection:
        values = decode_message(raw, max_bytes=self.max_message_bytes, layouts=self.layouts)
        if isinstance(values, Malformed):
            return self._reject(Rejection(values.kind, values.reason, values.stage))
        node = values[0].node  # (a bundle's parts are all of its node)
        if key is None or key != node.encode():
            shown = key if key is None or len(key) <= 200 else key[:200] + b"..."
            return self._reject(
                Rejection(
                    WRONG_KEY,
                    f"message key {shown!r} must be the snapshot's node {node!r} (telemetry is partitioned by node)",
                    "key",
                )
            )
        for value in values:
            rejected = self.bounds.check(value.ts, arrival, sent_at) or entities(value)
            if rejected is not None:
                return self._reject(rejected)
        return values

    def _reject(self, rejection: Rejection) -> Rejection:
        self.stats.reject(rejection.kind)
        return rejection


def entities(snapshot: Snapshot) -> Rejection | None:
    """A snapshot naming a model badly or carrying more GPUs or models than LIMITS allows, as a rejection:
    every stage after this one takes its names as keys and its entities into a bounded state record."""
    problem = entity_problem(snapshot)
    return None if problem is None else Rejection(problem[0], problem[1], "entities")


class DeadLetters:
    """Publishes the dead letter of a rejected message with `send` (a Faust topic's ``send``): bounded, so it
    always fits in a message (:meth:`tailhound.deadletter.DeadLetter.from_bytes`). One that cannot be
    produced is logged and counted (``stats.deadletter_failed``), never raised: the message is skipped and
    processing goes on."""

    def __init__(
        self, send: Callable[..., Awaitable[Any]], stats: IntakeStats, clock: Callable[[], float] = time.time
    ) -> None:
        self.send = send
        self.stats = stats
        self.clock = clock

    async def publish(self, message: Any, reason: str, stage: str, kind: str) -> bool:
        """True when the dead letter was handed to the producer."""
        where = (message.topic, message.partition, message.offset)
        try:
            record = DeadLetter.from_bytes(
                message.value,
                ts=self.clock(),
                reason=reason,
                stage=stage,
                kind=kind,
                topic=message.topic,
                partition=message.partition,
                offset=message.offset,
                key=message.key.decode(errors="replace") if message.key else None,
            )
            log.warning("dead-letter %s[%s]@%s (%s, %s): %s", *where, stage, kind, record.reason)
            await self.send(key=message.key[:MAX_KEY] if message.key else None, value=record.encoded())
        except Exception as exc:  # a dead letter that cannot be written must not stop the worker
            self.stats.deadletter_failed += 1
            log.error(
                "could not produce the dead letter of %s[%s]@%s (%s, %s); the message is skipped: %r",
                *where,
                stage,
                kind,
                exc,
            )
            return False
        return True


class Progression:
    """Offline arrival time: each item's time is judged against the recording around it.

    :meth:`judge` yields ``(item, rejection or None)`` in order, looking `window` items ahead. An item more
    than the skew ahead of the median time of the accepted items before it is rejected, unless the items
    after it (at least ``window // 2`` of them) agree with it: then the whole recording jumped (a pause) and
    the item starts the new stretch. So a lone item from the future, or a few in a row, are rejected; a
    recording that steps forward or back is replayed whole, except a step within its last ``window // 2``
    items, which cannot be told from items from the future (they are rejected)."""

    def __init__(self, bounds: TimeBounds, window: int = 8) -> None:
        self.bounds = bounds
        self.window = window
        self.quorum = max(1, window // 2)

    def judge(self, items: Iterable[T], ts_of: Callable[[T], float]) -> Iterator[tuple[T, Rejection | None]]:
        skew = self.bounds.max_future_skew_s
        before: deque[float] = deque(maxlen=self.window)  # times of the accepted items
        ahead: deque[tuple[T, float]] = deque()
        it = iter(items)
        exhausted = False
        while True:
            while not exhausted and len(ahead) <= self.window:
                try:
                    item = next(it)
                except StopIteration:
                    exhausted = True
                    break
                ahead.append((item, ts_of(item)))
            if not ahead:
                return
            item, ts = ahead.popleft()
            after = [t for _, t in ahead]
            leading = statistics.median_low(after) if len(after) >= self.quorum else None
            trailing = statistics.median_low(before) if before else None
            rejection = None
            if trailing is None:  # the start: only what follows can tell
                if leading is not None and ts > leading + skew:
                    rejection = self.bounds.check(ts, leading)
            elif ts > trailing + skew:
                if leading is not None and ts <= leading + skew:
                    before.clear()  # the recording jumped ahead: a new stretch starts here
                else:
                    rejection = self.bounds.check(ts, trailing if leading is None else max(trailing, leading))
            if rejection is None:
                before.append(ts)
            yield item, rejection


def last_seen(raw: dict[str, Any]) -> float:
    """Event time of a stored node state's newest snapshot."""
    seen = raw.get("last_ts") or {}
    return max(seen.values()) if seen else float(raw.get("persisted_at") or 0.0)


class NodeExpiry:
    """Nodes not seen for `expiry_s` of their partition's event time. Per partition, the clock is the event
    time of the latest accepted snapshot (TimeBounds keeps it near arrival: no message moves it far; it may
    step back, when files are replayed one after another, and then expires nothing until it is past the
    nodes again); :meth:`tick` says when a look is due, :meth:`gone` which stored nodes are silent."""

    def __init__(self, expiry_s: float | None, check_every_s: float | None = None) -> None:
        self.expiry_s = expiry_s
        self.check_every_s = (
            check_every_s if check_every_s is not None else (min(60.0, expiry_s / 4) if expiry_s else 60.0)
        )
        self._clock: dict[int, float] = {}
        self._checked: dict[int, float] = {}

    def clock(self, partition: int) -> float | None:
        return self._clock.get(partition)

    def tick(self, partition: int, ts: float) -> bool:
        """An accepted snapshot at `ts` on `partition`; True when that partition's nodes are due a look."""
        if not self.expiry_s:
            return False
        clock = self._clock[partition] = ts
        last = self._checked.get(partition)
        if last is None or clock < last:
            self._checked[partition] = clock
            return False
        if clock - last >= self.check_every_s:
            self._checked[partition] = clock
            return True
        return False

    def gone(
        self,
        partition: int,
        states: Iterable[tuple[str, Any]],
        partition_of: Callable[[str], int | None] = lambda node: None,
        cutoff: float | None = None,
    ) -> list[tuple[str, float]]:
        """(node, last seen) of the stored `states` of `partition` silent for more than expiry_s (or last seen
        before `cutoff`). `partition_of` names the partition of a state written before it said so itself."""
        clock = self._clock.get(partition)
        if cutoff is None:
            if clock is None or not self.expiry_s:
                return []
            cutoff = clock - self.expiry_s
        out = []
        for node, raw in states:
            if not isinstance(raw, Mapping):
                continue
            part = raw.get("partition")
            if part is None:
                part = partition_of(node)
            if part != partition:
                continue
            seen = last_seen(raw)
            if seen < cutoff:
                out.append((node, seen))
        return out
