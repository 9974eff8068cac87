"""What the console shows of an incident (pure): :class:`IncidentView`, built from the notifier's state
(:func:`views_from_groups`) or from a replay's events (:func:`views_from_events`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from tailhound.incident import IncidentEvent
from tailhound.notifier.state import DeliveryLog, GroupState

MarkKind = Literal["opened", "updated", "resolved"]


@dataclass(frozen=True)
class Mark:
    """One lifecycle event of the incident, for the charts' marks."""

    ts: float
    kind: MarkKind
    sequence: int


@dataclass(frozen=True)
class DeliveryRow:
    """One notification to one receiver: what it was, when, and how it went."""

    receiver: str
    sequence: int
    kind: str
    #: when the notifier decided to send it (wall clock)
    created_at: float
    #: when it was delivered or given up on (None: still pending)
    at: float | None
    #: delivered | pending | retrying | gave-up
    outcome: str
    attempts: int = 0
    error: str | None = None
    flapping: bool = False


@dataclass
class IncidentView:
    """One incident as the console shows it: its latest event (with the chart series), its lifecycle marks,
    the notifications sent about it and why any were held back."""

    event: IncidentEvent
    marks: list[Mark] = field(default_factory=list)
    deliveries: list[DeliveryRow] = field(default_factory=list)
    #: the notification group it belongs to (None offline)
    group_id: str | None = None
    #: why the last notification was held back (silenced by ..., inhibited by ...)
    suppressed: str | None = None

    @property
    def incident_id(self) -> str:
        return self.event.incident_id

    @property
    def open(self) -> bool:
        return self.event.event != "resolved"

    def age_s(self, now: float) -> float:
        """How long it has been open (to its resolution once resolved), seconds."""
        end = self.event.resolved_at if self.event.resolved_at else now
        return max(end - self.event.opened_at, 0.0)


def views_from_events(events: list[IncidentEvent]) -> list[IncidentView]:
    """One view per incident of a replay (or any event list): the latest event, with every event a mark.
    Ordered by opening time."""
    latest: dict[str, IncidentEvent] = {}
    marks: dict[str, list[Mark]] = {}
    for ev in events:
        cur = latest.get(ev.incident_id)
        if cur is None or ev.sequence >= cur.sequence:
            latest[ev.incident_id] = ev
        marks.setdefault(ev.incident_id, []).append(Mark(ev.ts, ev.event, ev.sequence))
    out = [
        IncidentView(event=ev, marks=sorted(set(marks[iid]), key=lambda m: (m.sequence, m.ts)))
        for iid, ev in latest.items()
    ]
    return sorted(out, key=lambda v: (v.event.opened_at, v.incident_id))


def views_from_groups(groups: Iterable[GroupState]) -> list[IncidentView]:
    """One view per incident of the notifier's groups (the live ones, then the recent ones): its latest event
    (with the chart series), its lifecycle marks, the notifications sent about its group to every receiver
    (from each log's history, and what is pending) and why the group's last notification was held back.
    An incident seen in two groups (an id used again after its group was forgotten) is shown once, as the
    first group has it. Open incidents first, newest first (resolved ones by their resolution)."""
    out: list[IncidentView] = []
    seen: set[str] = set()
    for grp in groups:
        deliveries = [row for log in grp.logs.values() for row in _delivery_rows(log)]
        deliveries.sort(key=lambda r: (r.created_at, r.receiver, r.sequence))
        for iid, ev in grp.incidents.items():
            if iid in seen:
                continue
            seen.add(iid)
            marks = [Mark(ts, kind, seq) for ts, kind, seq in grp.marks.get(iid, [])]
            out.append(
                IncidentView(
                    event=ev,
                    marks=marks or [Mark(ev.ts, ev.event, ev.sequence)],
                    deliveries=list(deliveries),
                    group_id=grp.group_id,
                    suppressed=grp.suppressed,
                )
            )
    return sorted(out, key=lambda v: (not v.open, -(v.event.opened_at if v.open else _ended(v.event)), v.incident_id))


def _ended(ev: IncidentEvent) -> float:
    return ev.resolved_at if ev.resolved_at is not None else ev.ts


def _delivery_rows(log: DeliveryLog) -> list[DeliveryRow]:
    """The log's recorded notifications, and pending ones it has no record of (a state record without
    ``history``)."""
    rows = [
        DeliveryRow(
            receiver=log.receiver,
            sequence=r.sequence,
            kind=r.kind,
            created_at=r.created_at,
            at=r.at,
            outcome=r.outcome,
            attempts=r.attempts,
            error=r.error,
            flapping=r.flapping,
        )
        for r in log.history
    ]
    recorded = {r.sequence for r in log.history}
    for i, n in enumerate(log.pending):
        if n.sequence in recorded:
            continue
        retrying = i == 0 and log.attempts > 0
        rows.append(
            DeliveryRow(
                receiver=log.receiver,
                sequence=n.sequence,
                kind=n.kind,
                created_at=n.ts,
                at=None,
                outcome="retrying" if retrying else "pending",
                attempts=log.attempts if retrying else 0,
                error=log.last_error if retrying else None,
                flapping=n.flapping,
            )
        )
    return rows


#: an event clock this far behind the wall clock is another clock (a replay, the demo's simulated fleet)
OTHER_CLOCK_S = 3600.0


def event_clock_offset(groups: Iterable[GroupState]) -> float:
    """How far the incidents' event time runs behind the wall clock, seconds: 0 for a live fleet (events are
    taken in seconds after they happen); for a replay or a simulated fleet (the demo's runs in 2026-01-01) the
    median gap between a group's creation (wall clock) and its first incident's opening (event time), so the
    console's ages and "as of" read in the fleet's time."""
    gaps = sorted(
        grp.created_at - min(ev.opened_at for ev in grp.incidents.values()) for grp in groups if grp.incidents
    )
    if not gaps:
        return 0.0
    gap = gaps[len(gaps) // 2]
    return gap if abs(gap) > OTHER_CLOCK_S else 0.0
