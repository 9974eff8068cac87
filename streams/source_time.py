"""Event time that one message cannot move: which snapshots of a source the step takes now, which it holds apart
until the source's next ones agree, and which came after a newer one without being a redelivery.

A snapshot's *lead* is how far its event time is after its sending (the Kafka message timestamp; the worker's
arrival when there is none, or when it is later than the arrival). An honest source's lead is about constant:
zero or a little below with synced clocks, its clock's offset otherwise, and a worker's consumer lag does not
change it. Per node and source the gate keeps the leads and times of the last :data:`WINDOW` snapshots it
let in (memory only) and holds apart a snapshot that is

- dated after its sending by more than ``tolerance_s`` past the source's usual lead (their median, or zero
  when that is below it: a simulator or a recording dated in the past is never held), or
- before the usual lead is learned, more than ``max_jump_s`` ahead of both its sending and its source's
  newest time.

A held snapshot is let in, with the ones after it, once ``confirm`` later snapshots of its source are ahead
as well (its clock stepped forward: its leads are learned again from them); when the next one comes on time
or from before it instead, it is discarded (an honest source does not date a snapshot after sending it).
A snapshot older than the newest one let in that is not one of the recent times (so not a redelivery) is
*out of order*: a dead letter the worker counts, never a silent drop."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from statistics import median

from tailhound.snapshot import Snapshot

#: leads and times kept per source (the median of an odd count is one of them)
WINDOW = 7
#: leads a source needs before the usual lead is used (before: only ``max_jump_s``)
LEARNED = 3


def lead_of(ts: float, arrival: float, sent_at: float | None) -> float:
    """How far `ts` is after the message was sent (the arrival stands in for a missing or later send time)."""
    ref = sent_at if sent_at is not None and 0 < sent_at <= arrival else arrival
    return ts - ref


class SourceClock:
    """The leads and event times of a source's last snapshots let in, oldest first."""

    __slots__ = ("leads", "times")

    def __init__(self) -> None:
        self.leads = array("d")
        self.times = array("d")

    def add(self, ts: float, lead: float) -> None:
        for ring, value in ((self.leads, lead), (self.times, ts)):
            ring.append(value)
            if len(ring) > WINDOW:
                del ring[0]

    def relearn(self, snapshots: list[tuple[Snapshot, float]]) -> None:
        """The source's clock stepped: its leads from now on are those of `snapshots`."""
        del self.leads[:]
        for snap, lead in snapshots[-WINDOW:]:
            self.leads.append(lead)
            self.times.append(snap.ts)
        del self.times[: max(0, len(self.times) - WINDOW)]

    def usual_lead(self) -> float | None:
        return median(self.leads) if len(self.leads) >= LEARNED else None

    def out_of_order(self, ts: float) -> bool:
        """`ts` falls among the recent times without being one of them: not a redelivery of what was let in."""
        times = self.times
        return len(times) > 0 and times[0] < ts < max(times) and ts not in times


@dataclass
class Verdict:
    """What the step does with a snapshot: take `steps` (with their leads) in order now, after `discarded`."""

    steps: list[tuple[Snapshot, float]] = field(default_factory=list)
    held: bool = False
    discarded: list[Snapshot] = field(default_factory=list)
    #: why the snapshot is out of order (a dead letter), None when it is not
    out_of_order: str | None = None


class EventTimeGate:
    """Held snapshots and source clocks per node (see the module doc)."""

    def __init__(self, max_jump_s: float, confirm: int = 2, tolerance_s: float = 2.0) -> None:
        self.max_jump_s, self.confirm, self.tolerance_s = max_jump_s, max(1, confirm), tolerance_s
        #: node -> source key -> snapshots held apart with their leads, oldest first (at most `confirm` + 1)
        self._held: dict[str, dict[str, list[tuple[Snapshot, float]]]] = {}
        self._clocks: dict[str, dict[str, SourceClock]] = {}

    def judge(self, snapshot: Snapshot, key: str, lead: float, newest: float | None) -> Verdict:
        """`newest`: the source's newest time on the node as stored (else the node's newest), None at first sight."""
        node = snapshot.node
        clock = self._clocks.get(node, {}).get(key)
        held = self._held.get(node, {}).get(key)
        if held is None:
            if newest is not None and snapshot.ts > newest and self._ahead(snapshot.ts, lead, newest, clock):
                self._held.setdefault(node, {})[key] = [(snapshot, lead)]
                return Verdict(held=True)
            if clock is not None and clock.out_of_order(snapshot.ts):
                return Verdict(out_of_order=self._why(snapshot, clock))
            return Verdict(steps=[(snapshot, lead)])
        if any(snap.ts == snapshot.ts and snap == snapshot for snap, _ in held):  # a redelivery of a held one
            return Verdict(held=True)
        if snapshot.ts > held[-1][0].ts and self._ahead(snapshot.ts, lead, None, clock):
            held.append((snapshot, lead))  # the source goes on after the held ones, ahead too: it agrees
            if len(held) <= self.confirm:
                return Verdict(held=True)
            self._release(node, key)
            self._clock(node, key).relearn(held)  # `confirm` snapshots agree: the clock stepped forward
            return Verdict(steps=held)
        # the source goes on without the held ones (on time, or from before them): they were ahead of it alone
        self._release(node, key)
        discarded = [snap for snap, _ in held]
        if clock is not None and clock.out_of_order(snapshot.ts):
            return Verdict(discarded=discarded, out_of_order=self._why(snapshot, clock))
        return Verdict(steps=[(snapshot, lead)], discarded=discarded)

    def let_in(self, snapshot: Snapshot, key: str, lead: float) -> None:
        """`snapshot` was evaluated (not a redelivery): its time and lead are the source's latest."""
        self._clock(snapshot.node, key).add(snapshot.ts, lead)

    def forget(self, node: str) -> None:
        self._held.pop(node, None)
        self._clocks.pop(node, None)

    def _ahead(self, ts: float, lead: float, newest: float | None, clock: SourceClock | None) -> bool:
        usual = clock.usual_lead() if clock is not None else None
        if usual is None:  # not learned yet: only a jump far ahead of the sending and of the source is held
            return lead > self.max_jump_s and (newest is None or ts > newest + self.max_jump_s)
        return lead > max(usual, 0.0) + self.tolerance_s

    def _clock(self, node: str, key: str) -> SourceClock:
        clocks = self._clocks.setdefault(node, {})
        clock = clocks.get(key)
        if clock is None:
            clock = clocks[key] = SourceClock()
        return clock

    def _release(self, node: str, key: str) -> None:
        sources = self._held.get(node)
        if sources is not None:
            sources.pop(key, None)
            if not sources:
                del self._held[node]

    @staticmethod
    def _why(snapshot: Snapshot, clock: SourceClock) -> str:
        return (
            f"event time {snapshot.ts:.3f} of {snapshot.source!r} on {snapshot.node!r} is before the newest one let in "
            f"({max(clock.times):.3f}) and is none of its recent times, so it is not a redelivery: a snapshot "
            "dated ahead of its sending came first, or the source's clock stepped back"
        )
