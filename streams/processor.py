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

What one message cannot do (:class:`Unprocessable` names why, the worker dead-letters it):

- move its source's event time ahead: a snapshot dated after its sending by more than the source usually is
  is held apart until the source's next ones agree with it (:mod:`tailhound.streams.source_time`); the held
  ones the source does not confirm are discarded (:attr:`StepResult.discarded`), and a snapshot that comes
  after a newer one without being a redelivery is out of order, so real snapshots are never taken for
  redeliveries;
- give a node more than ``max_sources`` sources and instances, or a state record over ``max_state_bytes``;
- grow the nodes held past ``max_nodes``: :meth:`SnapshotProcessor.admit` names the least recently seen ones to
  evict (:mod:`tailhound.streams.fleet_cap`), :meth:`SnapshotProcessor.evict` resolves their incidents.
"""

from __future__ import annotations

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import IncidentEvent
from tailhound.snapshot import LIMITS, Snapshot

from .evaluator import NodeState, evaluate, heal_future, source_key
from .fleet_cap import RecentNames
from .latest_values import LatestValues
from .loadmodel import LoadModel
from .packed_state import PackedState
from .resolutions import resolve_gone
from .ruleset.rule_reads import window_stats_read
from .ruleset.rulefile import RuleSet
from .source_time import EventTimeGate, lead_of
from .stages.admit import redelivered
from .step_result import (
    OUT_OF_ORDER,
    STATE_TOO_LARGE,
    TOO_MANY_SOURCES,
    RawState,
    StepResult,
    Unprocessable,
)

PERSIST_EVERY_S = 60.0


def _decisions(state: NodeState) -> tuple:
    """What must never be lost on a restart: rule entity states (with the last time a firing entity
    held, which decides when it resolves) and open incidents. While something fires, that is every
    snapshot; in quiet times it is only the periodic write."""
    if not (state.rules or state.incidents or state.orphans):
        return _NOTHING_DECIDED  # a quiet node (most snapshots): what the general case gives, without the sorts
    rules = tuple(
        sorted(
            (n, tuple(sorted(r.pending)), tuple(sorted((e, f.last_true) for e, f in r.firing.items())))
            for n, r in state.rules.items()
        )
    )
    incidents = tuple(sorted((d, e.incident_id, e.sequence) for d, e in state.incidents.items()))
    return rules, incidents, tuple(sorted(state.orphans.items()))


_NOTHING_DECIDED: tuple = ((), (), ())


class SnapshotProcessor:
    """Keeps each node's latest values in memory (see :mod:`tailhound.streams.latest_values`) next to the
    persisted state the caller stores."""

    def __init__(
        self,
        rules: RuleSet,
        catalog: Catalog | None = None,
        load_models: dict[str, LoadModel] | None = None,
        sla: dict[str, dict[str, float]] | None = None,
        all_stats: bool = False,
        max_jump_s: float | None = None,
        confirm: int = 2,
        lead_tolerance_s: float = 2.0,
        max_sources: int = LIMITS.max_sources_per_node,
        max_state_bytes: int | None = None,
        max_nodes: int | None = None,
    ) -> None:
        self.rules = rules
        #: nodes in the order they last arrived, per partition; over `max_nodes` (None: no cap) see admit()
        self.recent = RecentNames(max_nodes)
        #: see the module doc and tailhound.streams.source_time (None: no snapshot is held apart)
        self.gate = None if max_jump_s is None else EventTimeGate(max_jump_s, confirm, lead_tolerance_s)
        self.max_sources = max_sources
        #: None: state records are not sized (offline, in memory)
        self.max_state_bytes = max_state_bytes
        self.catalog = catalog or default_catalog()
        #: load-aware baselines by signal (``latency.ttft.p95`` -> model), see tailhound.streams.loadmodel
        self.load_models = load_models or {}
        #: per-model service levels (settings.streams.ttft_p99_sla_s ...), see tailhound.streams.evaluator
        self.sla = sla
        #: derive every window statistic into the view, not only those the rules and models read (loadfit)
        self.all_stats = all_stats
        self._latest: dict[str, LatestValues] = {}
        self._states: dict[str, NodeState] = {}
        #: seconds spent per evaluation stage, added up (None: not measured; the worker sets a dict)
        self.timings: dict[str, float] | None = None

    def replace_rules(self, rules: RuleSet) -> None:
        """Judge the next snapshots with `rules` (a reload): baselines, windows and open incidents carry over;
        state of rules that are gone is dropped on each node's next snapshot, and their incidents resolve
        (or take a remaining cause as root). Window statistics the new rules read and the old ones did not are
        derived for every node in memory as of its last histogram snapshot, so the view reads as if they had
        always been derived."""
        before, self.rules = self.rules, rules
        if self.all_stats:
            return
        added = window_stats_read(rules, self.load_models) - window_stats_read(before, self.load_models)
        if not added:
            return
        for node, state in self._states.items():
            latest = self._latest.get(node)
            if latest is not None and latest.stats_at is not None and state._tracker is not None:
                ts, interval_s = latest.stats_at
                latest.update(state._tracker.engine_values(ts, node, added), ts, interval_s)

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

    def step(
        self,
        raw_state: RawState | None,
        snapshot: Snapshot,
        *,
        horizon: float | None = None,
        partition: int | None = None,
        arrival: float | None = None,
        sent_at: float | None = None,
    ) -> StepResult:
        """Evaluate `snapshot` on the node's stored state. `horizon`: the latest event time acceptable now
        (arrival + max future skew); a stored state is healed of times after it when it is decoded
        (:func:`tailhound.streams.evaluator.heal_future`). `partition`: the telemetry partition the snapshot
        came on, kept in the state (node expiry). `arrival`: when the worker took it (wall clock), `sent_at`: the
        message's timestamp; with ``max_jump_s`` a snapshot ahead of its source is held apart (see the module doc)."""
        if arrival is None or self.gate is None:
            return self._step(raw_state, snapshot, horizon, partition)
        key, lead = source_key(snapshot), lead_of(snapshot.ts, arrival, sent_at)
        verdict = self.gate.judge(snapshot, key, lead, self._newest(raw_state, snapshot.node, key))
        if verdict.out_of_order is not None:
            raise Unprocessable(OUT_OF_ORDER, verdict.out_of_order, discarded=verdict.discarded)
        out = StepResult(state=None, changed=False, held=verdict.held, discarded=verdict.discarded)
        for snap, snap_lead in verdict.steps:  # in order, as if they had come one by one
            result = self._step(raw_state, snap, horizon, partition)
            if not result.redelivered:
                self.gate.let_in(snap, key, snap_lead)
            out.events.extend(result.events)
            out.redelivered = result.redelivered
            if result.changed:
                raw_state = out.state = result.state
                out.changed = True
        return out

    def admit(self, node: str, partition: int | None = None) -> list[str]:
        """A snapshot of `node` arrived on `partition`: the nodes of that partition to evict now, the least
        recently seen first, so that at most ``max_nodes`` are held (the caller passes each to :meth:`evict`
        and deletes its stored state)."""
        return self.recent.touch(node, partition)

    def adopt(self, nodes: list[tuple[str, float]], partition: int | None = None) -> None:
        """Stored nodes of `partition` with their last-seen times (the table after a restart): those not held
        yet count as older than every node seen since, the least recently seen first."""
        self.recent.adopt([n for n, _ in sorted(nodes, key=lambda ns: ns[1])], partition)

    def evict(self, node: str, raw_state: RawState | None, now: float) -> list[IncidentEvent]:
        """Forget `node` (over the cap, see :meth:`admit`): its open incidents resolve ("node gone") at event
        time `now`, returned; the caller deletes its stored state, so if it sends again it starts fresh."""
        state = self._state_of(node, raw_state, cached_alone=True)
        if state is None:
            self.forget(node)
            return []
        seen = max(state.last_ts.values(), default=state.persisted_at)
        events = resolve_gone(state.incidents, self.rules, node, state.model_names, max(now, seen), seen)
        self.forget(node)
        return events

    def _newest(self, raw_state: RawState | None, node: str, key: str) -> float | None:
        """The source's newest time on the node (else the node's newest of any source), None at first sight."""
        cached = self._states.get(node)
        if cached is not None and raw_state is not None and raw_state.get("version") == cached.version:
            last_ts = cached.last_ts
        else:
            last_ts = (raw_state or {}).get("last_ts") or {}
        if key in last_ts:
            return float(last_ts[key])
        return max(map(float, last_ts.values()), default=None)

    def _step(
        self, raw_state: RawState | None, snapshot: Snapshot, horizon: float | None, partition: int | None
    ) -> StepResult:
        node = snapshot.node
        cached = self._states.get(node)
        healed = False
        if raw_state is None:
            before = None
        elif cached is not None and raw_state.get("version") == cached.version:
            before = cached  # the stored state is the one we wrote last: the cached one is at least as new
        else:  # first sight, a restart or a rebalance: the stored state is the truth
            before = NodeState.model_validate(raw_state)
            healed = horizon is not None and heal_future(before, horizon, now=min(snapshot.ts, horizon))
        moved = partition is not None and (before is None or before.partition != partition)
        if before is not None:
            key = source_key(snapshot)
            # a snapshot that moved partitions is stepped (the state records the new partition); the admit
            # stage still ends it as a redelivery
            if not moved and redelivered(before, snapshot):
                self._states[node] = before  # (healed or not, it is what the stored version holds now)
                return StepResult(state=None, changed=False, redelivered=True)
            if key not in before.last_ts and len(before.last_ts) >= self.max_sources:
                self._states[node] = before
                raise Unprocessable(
                    TOO_MANY_SOURCES,
                    f"node {node!r} already has {len(before.last_ts)} sources "
                    f"and instances; at most {self.max_sources} are kept (a new one, {key!r}, "
                    "is refused)",
                )
        decided = _decisions(before) if before is not None else None
        latest = self._latest.get(node)
        if latest is None:
            latest = self._latest[node] = LatestValues()
        try:
            after, events = evaluate(
                before,
                snapshot,
                self.rules,
                self.catalog,
                latest=latest,
                copy=False,
                load_models=self.load_models,
                sla=self.sla,
                timings=self.timings,
                all_stats=self.all_stats,
            )
        except Exception:
            self._states.pop(node, None)  # possibly half-updated: decode the stored state next time
            raise
        self._states[node] = after
        if moved:
            after.partition = partition
        persist = (
            before is None
            or bool(events)
            or _decisions(after) != decided
            or healed
            or moved
            or snapshot.ts - after.persisted_at >= PERSIST_EVERY_S
        )
        if not persist:
            return StepResult(state=None, changed=False, events=events)
        after.version += 1
        after.persisted_at = snapshot.ts
        after.sync()
        text = after.__pydantic_serializer__.to_json(after, by_alias=True)  # (model_dump_json's bytes)
        after.shed()  # the record holds the stored forms; the live state keeps only the objects
        if self.max_state_bytes is not None and len(text) > self.max_state_bytes:
            # the stored state stays the truth (decoded again next time); the latest values the snapshot
            # brought are dropped with it (the node's sources bring theirs again within an interval)
            self._states.pop(node, None)
            self._latest.pop(node, None)
            raise Unprocessable(
                STATE_TOO_LARGE,
                f"node {node!r}'s state record would be {len(text):,} bytes; at "
                f"most {self.max_state_bytes:,} can be produced (the snapshot is not applied)",
            )
        at_hand = {
            "version": after.version,
            "partition": after.partition,
            "last_ts": dict(after.last_ts),
            "persisted_at": after.persisted_at,
        }
        return StepResult(state=PackedState.pack(text, at_hand), changed=True, events=events)

    def expire(self, node: str, raw_state: RawState | None, now: float, expiry_s: float) -> list[IncidentEvent] | None:
        """Forget `node` if it has sent nothing for more than `expiry_s` at event time `now`: its open
        incidents resolve with a "node gone" event (returned; the caller deletes the stored state). None when
        it is not silent after all (the cached state knows a newer snapshot than the stored one)."""
        cached = self._states.get(node)
        state = self._state_of(node, raw_state, cached_alone=False)
        if state is None:
            self.forget(node)
            return []
        seen = max(state.last_ts.values(), default=state.persisted_at)
        if cached is not None:
            seen = max(seen, max(cached.last_ts.values(), default=0.0))
        if now - seen <= expiry_s:
            return None
        events = resolve_gone(state.incidents, self.rules, node, state.model_names, now, seen)
        self.forget(node)
        return events

    def _state_of(self, node: str, raw_state: RawState | None, cached_alone: bool) -> NodeState | None:
        """The node's state: the cached one when it is the stored version (with `cached_alone`, also when
        nothing is stored), else the stored one; None when there is neither."""
        cached = self._states.get(node)
        if cached is not None and (cached_alone if raw_state is None else raw_state.get("version") == cached.version):
            return cached
        return NodeState.model_validate(raw_state) if raw_state is not None else None

    def forget(self, node: str) -> None:
        """Drop what is kept in memory for `node`."""
        self._states.pop(node, None)
        self._latest.pop(node, None)
        if self.gate is not None:
            self.gate.forget(node)
        self.recent.discard(node)

    def forget_partitions(self, partitions: set[int]) -> list[str]:
        """Drop what is kept in memory for the nodes of `partitions` (they moved to another worker, which may
        change their stored state: if they come back, it is decoded again). Returns those nodes."""
        nodes = [n for n, st in self._states.items() if st.partition in partitions]
        for node in nodes:
            self.forget(node)
        self.recent.forget_partitions(partitions)
        return nodes

    def __len__(self) -> int:
        """Nodes held in memory."""
        return len(self._states)


def read_load_models(paths: list) -> dict[str, LoadModel]:
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

    def __delitem__(self, node: str) -> None:
        del self._data[node]

    def items(self) -> list[tuple[str, RawState]]:
        return list(self._data.items())

    def __len__(self) -> int:
        return len(self._data)
