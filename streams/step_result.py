"""What one step of the node stage returns (:class:`StepResult`) and why a snapshot cannot be taken
(:class:`Unprocessable`, with a countable kind): the processor's vocabulary, shared by the worker's node stage
and replay."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailhound.incident import IncidentEvent
from tailhound.snapshot import Snapshot

__all__ = [
    "AHEAD_OF_SOURCE",
    "OUT_OF_ORDER",
    "STATE_TOO_LARGE",
    "TOO_MANY_SOURCES",
    "RawState",
    "StepResult",
    "Unprocessable",
]

#: a stored state: the processor writes :class:`tailhound.streams.packed_state.PackedState`, a table read back may
#: give a dict (older workers, recovery) or a store's lazily decoded form
RawState = Mapping[str, Any]


@dataclass
class StepResult:
    state: RawState | None  # what to store when `changed` (None otherwise)
    changed: bool
    events: list[IncidentEvent] = field(default_factory=list)
    #: the snapshot was not newer than its source's last one on the node (a redelivery): ignored
    redelivered: bool = False
    #: the snapshot jumped ahead of its source and waits for the next ones to confirm it (tailhound.streams.processor)
    held: bool = False
    #: snapshots held apart that the source's next one did not confirm: never evaluated (dead letters)
    discarded: list[Snapshot] = field(default_factory=list)


class Unprocessable(ValueError):
    """A snapshot the step cannot take without breaking a bound of the node's state; `kind` is countable."""

    def __init__(self, kind: str, reason: str, discarded: list[Snapshot] | None = None) -> None:
        super().__init__(reason)
        self.kind = kind
        #: snapshots held apart that this one showed were ahead of their source (dead letters too)
        self.discarded = discarded or []


#: countable reasons of Unprocessable, and of discarded snapshots
TOO_MANY_SOURCES = "too_many_sources"
STATE_TOO_LARGE = "state_too_large"
AHEAD_OF_SOURCE = "ahead_of_source"
OUT_OF_ORDER = "out_of_order"
