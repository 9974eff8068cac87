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
from .loadmodel import LoadModel
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

    def __init__(self, rules: RuleSet, catalog: Catalog | None = None,
                 models: dict[str, LoadModel] | None = None, sla: dict[str, dict[str, float]] | None = None) -> None:
        self.rules = rules
        self.catalog = catalog or default_catalog()
        #: load-aware baselines by signal (``latency.ttft.p95`` -> model), see streams.loadmodel
        self.models = models or {}
        #: per-model service levels (settings.streams.ttft_p99_sla_s ...), see streams.evaluator
        self.sla = sla
        self._latest: dict[str, LatestValues] = {}
        self._trackers: dict[str, tuple[int, LatencyTracker]] = {}

    def view(self, node: str, now: float) -> dict:
        """The node's current merged values (what rules are judged on)."""
        latest = self._latest.get(node)
        return latest.view(now) if latest is not None else {}

    def step(self, raw_state: RawState | None, snapshot: Snapshot) -> StepResult:
        before = NodeState.model_validate(raw_state) if raw_state else None
        latest = self._latest.get(snapshot.node)
        if latest is None:
            latest = self._latest[snapshot.node] = LatestValues()
        after, events = evaluate(before, snapshot, self.rules, self.catalog, latest=latest, copy=False,
                                 trackers=self._trackers, models=self.models, sla=self.sla)
        dumped = after.model_dump(mode="json")
        return StepResult(state=dumped, changed=dumped != raw_state, events=events)


def load_models(paths: list) -> dict[str, LoadModel]:
    """Load-aware baseline artifacts by the signal they model (a bad file raises naming it)."""
    models: dict[str, LoadModel] = {}
    for p in paths:
        model = LoadModel.load(p)
        models[model.signal] = model
    return models


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
