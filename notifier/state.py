"""The notifier's durable state: incident groups with their per-receiver notification logs, and silences.

Everything here is JSON-able pydantic and lives in the notifier's table (changelogged on the broker),
keyed ``group:<group_id>`` and ``silence:<silence_id>`` (and ``recent:<group_id>``: groups the pipeline is
done with, kept for the incident console, :mod:`tailhound.notifier.history`). After a worker is killed and
restarted the state comes back from the changelog: what was delivered (so nothing is paged twice), what is
still pending (so the resolve still goes out) and what each receiver needs to find its earlier message.
A group also records, for the console, each notification's outcome (:class:`DeliveryRecord`) and each
incident's lifecycle (:attr:`GroupState.marks`), both bounded.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from tailhound.incident import IncidentEvent

from .limits import (
    MAX_DELIVERY_HISTORY,
    MAX_MARKS_PER_INCIDENT,
    MAX_MATCHER_CHARS,
    MAX_MATCHERS,
    MAX_PROGRAM_SIZE,
    MAX_SILENCE_DURATION_S,
    text_within,
)
from .matchers import Matcher, MatcherField, matches_all
from .model import Notification, NotificationKind

GroupStatus = Literal["firing", "resolved"]
DeliveryOutcome = Literal["pending", "retrying", "delivered", "gave-up"]
#: one lifecycle event of an incident: (event time, opened | updated | resolved, sequence)
LifecycleMark = tuple[float, Literal["opened", "updated", "resolved"], int]


class DeliveryRecord(BaseModel):
    """What became of one notification to one receiver (the console's notification history)."""

    model_config = ConfigDict(extra="forbid")

    sequence: int
    kind: NotificationKind
    flapping: bool = False
    #: when the notifier decided to send it (the Notification's ``ts``)
    created_at: float
    #: when it was delivered or given up on (None while pending or retrying)
    at: float | None = None
    outcome: DeliveryOutcome = "pending"
    #: failed attempts so far (retrying) or in all (gave-up)
    attempts: int = 0
    error: str | None = None


class DeliveryLog(BaseModel):
    """What one receiver has been sent about one group, and what is still on its way."""

    model_config = ConfigDict(extra="forbid")

    receiver: str
    #: last notification sequence created for this receiver (its idempotency keys count up from 1)
    sequence: int = 0
    #: last sequence delivered (or given up on and dead-lettered)
    delivered: int = 0
    #: what the receiver returned last (Slack channel + ts, ...), passed back on the next send
    receipt: dict[str, str] = Field(default_factory=dict)
    #: created and not yet delivered, oldest first
    pending: list[Notification] = Field(default_factory=list)
    #: failed attempts of ``pending[0]``
    attempts: int = 0
    next_attempt_at: float = 0.0
    last_error: str | None = None
    #: kind of the last notification (not counting flapping notices) that reached the receiver
    last_kind: NotificationKind | None = None
    #: the latest notifications and their outcomes, oldest first (at most MAX_DELIVERY_HISTORY)
    history: list[DeliveryRecord] = Field(default_factory=list)

    def note_created(self, n: Notification) -> None:
        """Record `n` as pending; a newer update that took the place of an unsent one replaces its record."""
        record = DeliveryRecord(sequence=n.sequence, kind=n.kind, flapping=n.flapping, created_at=n.ts)
        if self.history and self.history[-1].sequence == n.sequence:
            self.history[-1] = record
        else:
            self.history.append(record)
            del self.history[:-MAX_DELIVERY_HISTORY]

    def note_outcome(
        self,
        sequence: int,
        outcome: DeliveryOutcome,
        *,
        at: float | None = None,
        attempts: int = 0,
        error: str | None = None,
    ) -> None:
        """Record how notification `sequence` went (a record dropped by the bound is not brought back)."""
        for i in range(len(self.history) - 1, -1, -1):
            if self.history[i].sequence == sequence:
                self.history[i] = self.history[i].model_copy(
                    update={"outcome": outcome, "at": at, "attempts": attempts, "error": error}
                )
                return

    def is_open(self) -> bool:
        """The receiver has (or will have) a firing notification of the group that no resolve followed
        (flapping notices do not count: they only mark the group)."""
        last = next((n.kind for n in reversed(self.pending) if not n.flapping), self.last_kind)
        return last is not None and last != "resolved"


class GroupState(BaseModel):
    """One notification group: incidents that share the grouping labels, and what was said about them."""

    model_config = ConfigDict(extra="forbid")

    group_id: str
    group_key: str
    labels: dict[str, str] = Field(default_factory=dict)
    #: latest event of each incident, the lead (the one that opened the group) first
    incidents: dict[str, IncidentEvent] = Field(default_factory=dict)
    created_at: float
    status: GroupStatus = "firing"
    #: when the status last changed, and every flip inside the flap window
    status_since: float
    flips: list[float] = Field(default_factory=list)
    flapping: bool = False
    #: what the last notifications said: status, content fingerprint, wall time
    notified_status: GroupStatus | None = None
    notified_fingerprint: str = ""
    notified_flapping: bool = False
    last_notified_at: float | None = None
    #: when the flush stage should look at this group again (None: only when an event arrives)
    next_flush_at: float | None = None
    #: why the last flush sent nothing (silenced by ..., inhibited by ...), for `incidents show`
    suppressed: str | None = None
    logs: dict[str, DeliveryLog] = Field(default_factory=dict)
    #: incident id -> every event of it taken in (not duplicates), oldest first: the first one and the newest
    #: MAX_MARKS_PER_INCIDENT - 1 (the console's lifecycle marks)
    marks: dict[str, list[LifecycleMark]] = Field(default_factory=dict)

    def mark(self, ev: IncidentEvent) -> None:
        """Record `ev` in its incident's lifecycle marks (an event already recorded is not added again)."""
        marks = self.marks.setdefault(ev.incident_id, [])
        if any(seq == ev.sequence for _, _, seq in marks):
            return
        marks.append((ev.ts, ev.event, ev.sequence))
        marks.sort(key=lambda m: (m[2], m[0]))
        if len(marks) > MAX_MARKS_PER_INCIDENT:
            del marks[1 : len(marks) - MAX_MARKS_PER_INCIDENT + 1]

    @property
    def lead(self) -> IncidentEvent:
        return self.ordered()[0]

    def ordered(self) -> list[IncidentEvent]:
        """Firing incidents first (in the order they joined), then resolved ones: a notification's lead
        is what is burning now, not a resolved first member of a re-opened group."""
        events = list(self.incidents.values())
        return [e for e in events if e.event != "resolved"] + [e for e in events if e.event == "resolved"]

    def computed_status(self) -> GroupStatus:
        return "resolved" if all(e.event == "resolved" for e in self.incidents.values()) else "firing"

    def fingerprint(self) -> str:
        """What a notification is about: which incidents, their root cause, severity, transience and state.
        New evidence values alone do not change it (no re-page for a number that moved)."""
        parts = sorted(
            f"{i}:{e.root_cause}:{e.severity}:{int(e.transient)}:{int(e.event == 'resolved')}"
            for i, e in self.incidents.items()
        )
        return "|".join(parts)

    def idle(self) -> bool:
        """Nothing left to deliver."""
        return all(not log.pending for log in self.logs.values())


class Silence(BaseModel):
    """Incidents matching every matcher between ``starts_at`` and ``ends_at`` are not notified.

    Bounded (:mod:`tailhound.notifier.limits`): at most MAX_MATCHERS matchers, author and comment of at
    most MAX_TEXT_BYTES each, finite times, and a silence made with the CLI or the API lasts at most
    MAX_SILENCE_DURATION_S. A record on the state topic that breaks a bound is skipped with a warning."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(default_factory=lambda: f"sil-{uuid.uuid4().hex[:12]}", min_length=1, max_length=64)
    matchers: list[MatcherField] = Field(min_length=1, max_length=MAX_MATCHERS)
    starts_at: float
    ends_at: float
    author: Annotated[str, AfterValidator(partial(text_within, what="author"))] = Field(min_length=1)
    comment: Annotated[str, AfterValidator(partial(text_within, what="comment"))] = Field(min_length=1)
    created_at: float
    #: set by ``silence expire``; an expired silence stays listed until it is old
    expired_at: float | None = None
    #: declared in the notifier config (a maintenance window) rather than created by CLI/API
    source: Literal["cli", "config"] = "cli"
    _cheap_first: list[Matcher] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _bounded(self) -> Silence:
        if self.source != "cli":  # a maintenance window from the config: reviewed in git, checked at load
            return self
        size = sum(len(m.value) for m in self.matchers)
        if size > MAX_MATCHER_CHARS:
            raise ValueError(f"the matchers' values have {size} characters together, more than {MAX_MATCHER_CHARS}")
        program = sum(m.program_size for m in self.matchers)
        if program > MAX_PROGRAM_SIZE:
            raise ValueError(
                f"the regular expressions are too complex together: {program} RE2 instructions, more "
                f"than {MAX_PROGRAM_SIZE} (simplify them, or use fewer)"
            )
        if self.ends_at - self.starts_at > MAX_SILENCE_DURATION_S:
            raise ValueError(
                f"a silence lasts at most {MAX_SILENCE_DURATION_S / 86400:g} days "
                f"(this one {(self.ends_at - self.starts_at) / 86400:.1f}); declare a longer "
                "maintenance window in the notifier config"
            )
        return self

    def active(self, now: float) -> bool:
        end = self.ends_at if self.expired_at is None else min(self.ends_at, self.expired_at)
        return self.starts_at <= now < end

    def state(self, now: float) -> str:
        if self.active(now):
            return "active"
        return "pending" if now < self.starts_at and self.expired_at is None else "expired"

    def mutes(self, labels: dict[str, str], now: float) -> bool:
        if not self.active(now):
            return False
        if self._cheap_first is None:  # equality matchers first: they are cheap and usually decide
            self._cheap_first = sorted(self.matchers, key=lambda m: m.op in ("=~", "!~"))
        return matches_all(self._cheap_first, labels)


class SilenceCommand(BaseModel):
    """What `tailhound silence add|expire` publishes to the notifier's input topic."""

    model_config = ConfigDict(extra="forbid")

    command: Literal["add", "expire"]
    silence: Silence | None = None
    silence_id: str | None = None
    ts: float
