"""The notification pipeline's stages, one concern per file, all of one shape::

    stage(batch: list[T], ctx: Context) -> list[T]

Intake stages (:mod:`.dedup`, :mod:`.group`) take incident events as they arrive. Notify stages take
the groups that are due: :mod:`.select` makes each a :class:`Draft` notification (or none),
:mod:`.inhibit`, :mod:`.silence`, :mod:`.flap` and :mod:`.route` filter and address candidates, and
:mod:`.enqueue` turns them into notifications in the delivery logs. :mod:`tailhound.notifier.pipeline`
assembles them; delivery (retries, backoff, circuit breaker, dead letters) is
:mod:`tailhound.notifier.deliver`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tailhound.incident import IncidentEvent
from tailhound.notifier.config import NotifierConfig
from tailhound.notifier.model import NotificationKind
from tailhound.notifier.state import GroupState, Silence

T = TypeVar("T")


@dataclass
class Context:
    """What every stage may read and change: the config, the durable state and the time."""

    now: float
    config: NotifierConfig
    groups: dict[str, GroupState]
    #: group_key -> group_id of groups that still take new incidents
    open_groups: dict[str, str]
    #: incident_id -> group_id
    incident_group: dict[str, str]
    #: incident_id -> highest sequence seen (dedup)
    seen: dict[str, int]
    silences: dict[str, Silence]
    #: where a notification's runbook link points (``#<root_cause>`` is added)
    runbook_url: str = ""
    #: the incident console's external base URL (None: notifications carry no console link)
    console_url: str | None = None
    #: table keys changed by this call (the wiring persists them)
    dirty: set[str] = field(default_factory=set)
    #: decisions worth a log line: (group_id, what)
    decisions: list[tuple[str, str]] = field(default_factory=list)
    #: what a stage computed once per call and reuses for every due group (active silences, inhibit
    #: sources); the incidents and silences do not change while one call runs the notify stages
    cache: dict[str, Any] = field(default_factory=dict)

    def touch(self, group: GroupState) -> None:
        self.dirty.add(f"group:{group.group_id}")

    def note(self, group_id: str, what: str) -> None:
        self.decisions.append((group_id, what))


@dataclass
class Draft:
    """A notification a due group would send, before inhibition, silences, flap control and routing."""

    group: GroupState
    kind: NotificationKind
    incidents: list[IncidentEvent]
    flapping: bool = False
    #: the group stopped flapping: say how it ended to every receiver that got the flapping notice
    settled: bool = False
    receivers: list[str] = field(default_factory=list)
    #: why it was dropped (set by the stage that dropped it, for `incidents show` and logs)
    suppressed: str | None = None


Stage = Callable[[list[Any], Context], list[Any]]
