"""One snapshot in, state and incident events out: the step the Faust agent and offline replay share.

State is kept per node as JSON-able dicts (what the Faust table stores and its changelog carries);
:class:`SnapshotProcessor` decodes it, runs the pure evaluator and says whether the state changed,
so the table is only written when it did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import IncidentEvent
from tailhound.snapshot import Snapshot

from .evaluator import NodeState, evaluate
from .latency import LatencyTracker
from .nodesignals import LatestValues
from .ruleset import RuleSet

RawState = dict[str, Any]


@dataclass
class StepResult:
    state: RawState
    changed: bool
    events: list[IncidentEvent] = field(default_factory=list)


class SnapshotProcessor:
    """Keeps each node's latest values in memory (see :mod:`streams.nodesignals`) next to the
    persisted state the caller stores."""

    def __init__(self, rules: RuleSet, catalog: Catalog | None = None) -> None:
        self.rules = rules
        self.catalog = catalog or default_catalog()
        self._latest: dict[str, LatestValues] = {}
        self._trackers: dict[str, tuple[int, LatencyTracker]] = {}

    def step(self, raw_state: RawState | None, snapshot: Snapshot) -> StepResult:
        before = NodeState.model_validate(raw_state) if raw_state else None
        latest = self._latest.get(snapshot.node)
        if latest is None:
            latest = self._latest[snapshot.node] = LatestValues()
        after, events = evaluate(before, snapshot, self.rules, self.catalog, latest=latest, copy=False,
                                 trackers=self._trackers)
        dumped = after.model_dump(mode="json")
        return StepResult(state=dumped, changed=dumped != raw_state, events=events)


class MemoryStateStore:
    """The offline stand-in for the Faust table: node -> raw state."""

    def __init__(self) -> None:
        self._data: dict[str, RawState] = {}

    def get(self, node: str) -> RawState | None:
        return self._data.get(node)

    def __setitem__(self, node: str, state: RawState) -> None:
        self._data[node] = state

    def __len__(self) -> int:
        return len(self._data)
