"""One snapshot in, state and incident events out: the step the Faust agent and offline replay share.

State is kept per node as JSON-able dicts (what the Faust table stores and its changelog carries).
Decoding and encoding that state for every snapshot was most of the worker's cost, so
:class:`SnapshotProcessor` keeps the decoded state of each node in memory and reuses it while the
stored one still carries the same ``version``; it asks the caller to write the table (``persist``)

- whenever incident events were emitted or a rule's pending/firing entities (or the last time a
  firing one held) or the incidents changed, so the incident lifecycle survives a restart exactly, and
- at least every :data:`PERSIST_EVERY_S` of event time otherwise (windows, baselines, histories:
  a restart loses at most that much of them, which only delays a baseline or a percentile).

Replay uses the same step with an in-memory store, so it gives the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import IncidentEvent
from tailhound.snapshot import Snapshot

from .evaluator import NodeState, evaluate
from .loadmodel import LoadModel
from .nodesignals import LatestValues
from .ruleset import RuleSet

RawState = dict[str, Any]
PERSIST_EVERY_S = 60.0


@dataclass
class StepResult:
    state: RawState | None  # what to store when `changed` (None otherwise)
    changed: bool
    events: list[IncidentEvent] = field(default_factory=list)


def _decisions(state: NodeState) -> tuple:
    """What must never be lost on a restart: rule entity states (with the last time a firing entity
    held, which decides when it resolves) and open incidents. While something fires, that is every
    snapshot; in quiet times it is only the periodic write."""
    if not (state.rules or state.incidents or state.orphans):
        return _NOTHING_DECIDED  # a quiet node (most snapshots): what the general case gives, without the sorts
    rules = tuple(sorted((n, tuple(sorted(r.pending)), tuple(sorted((e, f.last_true) for e, f in r.firing.items())))
                         for n, r in state.rules.items()))
    incidents = tuple(sorted((d, e.incident_id, e.sequence) for d, e in state.incidents.items()))
    return rules, incidents, tuple(sorted(state.orphans.items()))


_NOTHING_DECIDED: tuple = ((), (), ())


class SnapshotProcessor:
    """Keeps each node's latest values in memory (see :mod:`tailhound.streams.nodesignals`) next to the
    persisted state the caller stores."""

    def __init__(self, rules: RuleSet, catalog: Catalog | None = None,
                 models: dict[str, LoadModel] | None = None, sla: dict[str, dict[str, float]] | None = None) -> None:
        self.rules = rules
        self.catalog = catalog or default_catalog()
        #: load-aware baselines by signal (``latency.ttft.p95`` -> model), see tailhound.streams.loadmodel
        self.models = models or {}
        #: per-model service levels (settings.streams.ttft_p99_sla_s ...), see tailhound.streams.evaluator
        self.sla = sla
        self._latest: dict[str, LatestValues] = {}
        self._states: dict[str, NodeState] = {}

    def open_causes(self, node: str) -> tuple[str, ...]:
        """Root causes of the node's open incidents (the model stage uses them for correlation)."""
        state = self._states.get(node)
        if state is None:
            return ()
        return tuple(sorted({ep.root_cause for ep in state.incidents.values() if not ep.fallback}))

    def view(self, node: str, now: float) -> dict:
        """The node's current merged values (what rules are judged on)."""
        latest = self._latest.get(node)
        return latest.view(now) if latest is not None else {}

    def step(self, raw_state: RawState | None, snapshot: Snapshot) -> StepResult:
        node = snapshot.node
        cached = self._states.get(node)
        if raw_state is None:
            before = None
        elif cached is not None and raw_state.get("version") == cached.version:
            before = cached  # the stored state is the one we wrote last: the cached one is at least as new
        else:  # first sight, a restart or a rebalance: the stored state is the truth
            before = NodeState.model_validate(raw_state)
        decided = _decisions(before) if before is not None else None
        latest = self._latest.get(node)
        if latest is None:
            latest = self._latest[node] = LatestValues()
        try:
            after, events = evaluate(before, snapshot, self.rules, self.catalog, latest=latest, copy=False,
                                     models=self.models, sla=self.sla)
        except Exception:
            self._states.pop(node, None)  # possibly half-updated: decode the stored state next time
            raise
        self._states[node] = after
        persist = (before is None or bool(events) or _decisions(after) != decided
                   or snapshot.ts - after.persisted_at >= PERSIST_EVERY_S)
        if not persist:
            return StepResult(state=None, changed=False, events=events)
        after.version += 1
        after.persisted_at = snapshot.ts
        after.sync()
        return StepResult(state=after.model_dump(mode="json"), changed=True, events=events)


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
