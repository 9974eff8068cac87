"""Event-time order in front of the roll-up, so its incidents do not depend on how partitions are spread.

The roll-up decides by order (a group's first incident leads it), and with several workers events arrive in an
order that depends on which was faster. :class:`EventOrder` holds them back and releases them sorted by (event
time, incident id, sequence) once every stage partition has vouched (:mod:`tailhound.streams.rollup.watermarks`)
that nothing earlier can come; replay runs the same order, so any number of workers gives replay's incidents.
Bounded: at most ``max_delay_s`` of wall time and :data:`MAX_PENDING` events wait; a *late* event is released at
once and counted. The state is JSON (the roll-up table stores it).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from tailhound.incident import IncidentEvent

from .watermarks import IDLE_S

#: a source whose watermark is behind by IDLE_S stops holding the others back only after this long without a
#: marker (wall time; offline replay, without a wall clock, uses event time alone)
IDLE_WALL_S = 60.0
#: most events held back at once; past it the oldest are released without waiting for the watermark
MAX_PENDING = 5000
NODE_STAGE = "node"
MODEL_STAGE = "model"
#: keys of the control messages on the roll-up's topic (incident ids start with "inc-"): progress markers
#: ``~progress/<stage>/<partition>`` with the watermark as the value, and the workers' wall-clock ticks
PROGRESS_PREFIX = b"~progress/"
TICK_KEY = b"~tick"
#: a fresh roll-up (no state yet) releases nothing by watermark for this many wall seconds: every worker's first
#: marker (sent at its partitions' first snapshots) must have a chance to arrive before the watermark means much
COLD_S = 5.0
#: progress sources: most of them kept (partitions of the telemetry and model topics)
MAX_SOURCES = 4096


class Pending(BaseModel):
    event: IncidentEvent
    #: wall time it arrived (unix seconds)
    arrived: float


class Progress(BaseModel):
    #: the source's watermark (event time)
    mark: float
    #: wall time of its latest marker (unix seconds)
    at: float = 0.0


class OrderState(BaseModel):
    pending: list[Pending] = Field(default_factory=list)
    #: progress source (``node/<partition>``, ``model/<partition>``) -> its watermark
    progress: dict[str, Progress] = Field(default_factory=dict)
    #: everything at or before this event time has been released
    released: float = 0.0
    #: events that arrived at or before ``released`` (let through in arrival order)
    late: int = 0
    #: events released by the wall-clock bound or the pending limit, before their watermark
    forced: int = 0
    #: wall time before which watermarks release nothing (a fresh roll-up: not every partition announced itself)
    cold_until: float | None = None


def order_key(ev: IncidentEvent) -> tuple[float, str, int]:
    return (ev.ts, ev.incident_id, ev.sequence)


class EventOrder:
    """Holds member events back and releases them in event-time order (see the module docstring).
    ``max_delay_s`` 0 turns the order off: every event is released as it arrives."""

    def __init__(
        self,
        max_delay_s: float,
        idle_s: float = IDLE_S,
        idle_wall_s: float = IDLE_WALL_S,
        max_pending: int = MAX_PENDING,
        cold_s: float = COLD_S,
    ) -> None:
        self.max_delay_s = max_delay_s
        self.cold_s = cold_s
        self.idle_s = idle_s
        self.idle_wall_s = idle_wall_s
        self.max_pending = max_pending

    @property
    def enabled(self) -> bool:
        return self.max_delay_s > 0

    def member(self, state: OrderState, ev: IncidentEvent, now: float) -> list[IncidentEvent]:
        """A node- or model-stage event arrived (wall time `now`): what to hand the roll-up now, in order."""
        if not self.enabled:
            return [ev]
        if ev.ts <= state.released:
            state.late += 1
            return [*self._release(state, now), ev]
        state.pending.append(Pending(event=ev, arrived=now))
        return self._release(state, now)

    def progress(self, state: OrderState, source: str, watermark: float, now: float) -> list[IncidentEvent]:
        """A stage partition vouched that its later events come after `watermark`."""
        if not math.isfinite(watermark):
            return []
        have = state.progress.get(source)
        if have is not None:
            have.mark, have.at = max(have.mark, watermark), now
        elif len(state.progress) < MAX_SOURCES:
            state.progress[source] = Progress(mark=watermark, at=now)
        return self._release(state, now) if self.enabled else []

    def tick(self, state: OrderState, now: float) -> list[IncidentEvent]:
        """Wall time passed: release what waited longer than ``max_delay_s``."""
        return self._release(state, now) if self.enabled and state.pending else []

    def drain(self, state: OrderState) -> list[IncidentEvent]:
        """Everything still held back, in order (the end of an offline replay)."""
        out = sorted((p.event for p in state.pending), key=order_key)
        state.pending = []
        if out:
            state.released = max(state.released, out[-1].ts)
        return out

    def watermark(self, state: OrderState, now: float = 0.0) -> float | None:
        """The oldest watermark of the sources that are not idle (None before any source reported). A source is
        idle when its watermark is ``idle_s`` behind the newest *and* it sent no marker for ``idle_wall_s`` of
        wall time: a worker catching up on a backlog is behind, not idle, and keeps sending markers."""
        if not state.progress:
            return None
        newest = max(p.mark for p in state.progress.values())
        return min(
            p.mark for p in state.progress.values() if newest - p.mark <= self.idle_s or now - p.at < self.idle_wall_s
        )

    def _release(self, state: OrderState, now: float) -> list[IncidentEvent]:
        if state.cold_until is None:
            state.cold_until = now + self.cold_s
        warm = now >= state.cold_until
        cutoff = max(state.released, (self.watermark(state, now) or 0.0) if warm else 0.0)
        if not state.pending:
            state.released = cutoff
            return []
        by_time = sorted(state.pending, key=lambda p: order_key(p.event))
        forced = max((p.event.ts for p in by_time if now - p.arrived >= self.max_delay_s), default=None)
        if len(by_time) > self.max_pending:
            over = by_time[len(by_time) - self.max_pending - 1].event.ts
            forced = over if forced is None else max(forced, over)
        if forced is not None and forced > cutoff:
            state.forced += sum(1 for p in by_time if cutoff < p.event.ts <= forced)
            cutoff = forced
        out = [p.event for p in by_time if p.event.ts <= cutoff]
        state.pending = [p for p in by_time if p.event.ts > cutoff]
        state.released = cutoff
        return out


def progress_key(stage: str, partition: int) -> bytes:
    """The key of a progress marker of `stage`'s `partition` (its value: the watermark, ASCII decimal)."""
    return PROGRESS_PREFIX + f"{stage}/{partition}".encode()


def is_control(key: bytes | None) -> bool:
    """A progress marker or a tick, not an incident event."""
    return bool(key) and key.startswith(b"~")  # type: ignore[union-attr]


def parse_progress(key: bytes, value: bytes | None) -> tuple[str, float] | None:
    """(source, watermark) of a progress marker; None for anything else or a malformed one."""
    if not key.startswith(PROGRESS_PREFIX) or not value or len(key) > 64 or len(value) > 32:
        return None
    try:
        mark = float(value.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return (key[len(PROGRESS_PREFIX) :].decode("ascii", "replace"), mark) if math.isfinite(mark) else None
