"""Model and fleet scope: per-model and fleet-wide latency percentiles, queue totals and their rules.

The node stage judges one node at a time. Questions like "is the model's TTFT P99 over its SLA" or
"are more requests waiting than twice the engines serving the model" need every engine of the model:
the model stage answers them.

It collects the engine snapshots (vLLM, TGI, NIM) of every node serving a model into event-time
buckets of :data:`BUCKET_S`. When every node that reported in the last :data:`IDLE_S` has moved past a
bucket's end (each node's snapshots arrive in order, so nothing more can land in it), the bucket is
closed into one synthetic snapshot per source for the model (node ``model:<name>``) and one for the
whole fleet (node ``fleet``):

- histogram bucket deltas of all engines added up, so percentiles are the model's own (what
  ``histogram_quantile(sum by (le) (rate(..._bucket)))`` gives), not a max of per-engine percentiles;
- counter deltas added up;
- gauges kept per engine, labelled ``engine="<node>/<engine>"``, so rules can ``sum`` and ``count``
  them (total waiting vs 2 x engines);
- ``model.nodes_with_cause``: how many of those nodes have an open node-level root cause (thermal,
  bandwidth, KV cache, ...), so a model-scope rule can leave a queue that one sick node explains to
  that node's incident (cross-node correlation: the node's cause explains the model's symptom).

The synthetic snapshots go through the same :class:`tailhound.streams.processor.SnapshotProcessor` as nodes,
with the rules whose scope is ``model`` or ``fleet``; their incidents are scoped to the model (or the
fleet), not to a node. Closing buckets by per-node progress keeps the result independent of how
partitions interleave once every node has reported, so replay and the worker agree. A node the
stage has not seen yet cannot hold a bucket open (data of a node that appears, or comes back, behind
the closed buckets is counted in ``late`` and dropped), and the aggregation buckets live in memory:
a restarted worker loses at most the open buckets (seconds of data).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tailhound.incident import IncidentEvent, Scope
from tailhound.snapshot import GaugeSample, Snapshot

from .engine_peers import NOT_EXPLAINING as PEER_NOT_EXPLAINING
from .engine_peers import EnginePeerWindows, peer_histograms
from .fleet_cap import MODEL, MODEL_NODE, RecentNames
from .model_merge import merge
from .processor import MemoryStateStore, SnapshotProcessor
from .rollup.watermarks import OldestLatest
from .ruleset.rulefile import Rule, RuleSet

ENGINE_SOURCES = frozenset({"vllm", "tgi", "nim", "sglang"})
MODEL_SCOPES = frozenset({"model", "fleet"})
BUCKET_S = 15.0
IDLE_S = 300.0
#: ... and, in the worker, sent nothing for this long (wall time): see ModelAggregator._oldest_active
IDLE_WALL_S = 60.0
#: a worker's aggregator that starts from nothing (no roster: a fresh deployment) closes no bucket for this many
#: wall seconds: the nodes whose partitions other workers run are forwarded from their first snapshots, and a
#: worker that reads a backlog faster than the others must not close buckets before it has heard of them
COLD_WAIT_S = 5.0
#: model-state table key of an aggregator's roster (ModelAggregator.roster)
ROSTER_PREFIX = "aggregator:"
FLEET = "fleet"
NODES_WITH_CAUSE = "tailhound_model_nodes_with_cause"
#: node-level root causes that do not explain a model-wide queue (they are the same problem seen per node)
_NOT_EXPLAINING = frozenset({"capacity"})


#: signals only the model stage computes (``model.nodes_with_cause``, the per-engine peer gauges)
MODEL_SIGNAL_PREFIX = "model."


def runs_in_model_stage(rule: Rule) -> bool:
    """Scope model or fleet, or an engine rule that reads the model stage's per-engine peer signals
    (``model.engine_tpot_mean``: an engine against the other engines serving its model)."""
    return rule.scope.value in MODEL_SCOPES or any(s.startswith(MODEL_SIGNAL_PREFIX) for s in rule.signals())


def split_rules(rules: RuleSet) -> tuple[RuleSet, RuleSet]:
    """(node-stage rules, model-stage rules: see :func:`runs_in_model_stage`)."""
    node = [r for r in rules.rules if not runs_in_model_stage(r)]
    model = [r for r in rules.rules if runs_in_model_stage(r)]
    return RuleSet(rules=node, files=rules.files), RuleSet(rules=model, files=rules.files)


def model_keys(snapshot: Snapshot, *, models: bool = True, fleet: bool = True) -> list[str]:
    """The aggregation keys an engine snapshot feeds: each model it serves, and the fleet."""
    if snapshot.source not in ENGINE_SOURCES or snapshot.error or not snapshot.samples:
        return []
    keys: list[str] = []
    if models:
        common = snapshot.labels.get("model_name")
        keys = sorted({m for s in snapshot.samples if (m := s.labels.get("model_name") or common)})
    return keys + [FLEET] if fleet else keys


def synthetic_node(key: str) -> str:
    return FLEET if key == FLEET else f"model:{key}"


@dataclass
class ModelAggregator:
    """Event-time buckets of the engine snapshots feeding one key (a model, or the fleet)."""

    key: str
    bucket_s: float = BUCKET_S
    idle_s: float = IDLE_S
    node_ts: dict[str, float] = field(default_factory=dict)
    buckets: dict[float, dict[str, list[Snapshot]]] = field(default_factory=dict)
    closed_until: float = 0.0
    prev_end: dict[str, float] = field(default_factory=dict)
    late: int = 0
    #: per node, the (event time, root causes) of its open incidents as of its latest snapshot
    node_causes: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)
    #: each engine against the others serving the model (None for the fleet, or without engine histograms)
    peers: EnginePeerWindows | None = None
    #: wall time each node's latest snapshot arrived (the worker's; offline replay has no wall clock)
    seen_at: dict[str, float] = field(default_factory=dict)
    #: per bucket, each node's open root causes as of its last snapshot in the bucket: what a closed bucket is
    #: judged with (event time: the same whichever node's worker ran ahead)
    bucket_causes: dict[float, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    #: each node's causes in the latest closed bucket it was in
    closed_causes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: a fresh aggregator in a worker closes nothing before this wall time (see COLD_WAIT_S)
    cold_until: float | None = None
    #: at most this many nodes are tracked (None: any); past it the least recently arrived is dropped from the
    #: roster (its data in open buckets stays), and `on_evict(MODEL_NODE, node)` is told
    max_nodes: int | None = None
    on_evict: Callable[[str, str], None] | None = None
    #: the newest of node_ts, and node_ts by time: the watermark without walking the roster (_oldest_active)
    _newest: float = field(default=float("-inf"), repr=False)
    _by_ts: OldestLatest = field(default_factory=OldestLatest, repr=False)

    def __post_init__(self) -> None:
        self._newest = max(self.node_ts.values(), default=float("-inf"))
        self._by_ts.rebuild(self.node_ts)

    def add(self, snapshot: Snapshot, causes: tuple[str, ...] = (), now: float | None = None) -> list[Snapshot]:
        """Take one engine snapshot (with the root causes open on its node) that arrived at wall time `now`
        (None offline); return the synthetic snapshots of the buckets it closed."""
        node = snapshot.node
        self.node_causes.pop(node, None)  # (re-inserted: the dicts keep the nodes in arrival order)
        self.node_causes[node] = (snapshot.ts, causes)
        if now is not None:
            self.seen_at.pop(node, None)
            self.seen_at[node] = now
        start = math.floor(snapshot.ts / self.bucket_s) * self.bucket_s
        if start < self.closed_until:
            self.late += 1  # its bucket was closed already (a node that came back late)
        else:
            self.buckets.setdefault(start, {}).setdefault(snapshot.node, []).append(snapshot)
            self.bucket_causes.setdefault(start, {})[snapshot.node] = causes
        ts = self.node_ts[node] = max(snapshot.ts, self.node_ts.pop(node, 0.0))
        self._newest = max(self._newest, ts)
        self._by_ts.push(node, ts, self.node_ts)
        if self.max_nodes is not None and len(self.node_ts) > self.max_nodes:
            self._drop_oldest_nodes()
        if now is not None and self.cold_until is None and not self.closed_until:
            self.cold_until = now + COLD_WAIT_S
        return self.close_ready(now)

    def _drop_oldest_nodes(self) -> None:
        """Over max_nodes: forget the nodes that arrived least recently (they no longer hold buckets open)."""
        dropped_newest = False
        for node in list(itertools.islice(self.node_ts, len(self.node_ts) - self.max_nodes)):  # type: ignore[operator]
            dropped_newest |= self.node_ts.get(node) == self._newest
            for d in (self.node_ts, self.seen_at, self.node_causes, self.closed_causes):
                d.pop(node, None)
            if self.on_evict is not None:
                self.on_evict(MODEL_NODE, node)
        if dropped_newest:  # (rare) the newest time went back: nodes left out as idle may count again
            self._newest = max(self.node_ts.values(), default=float("-inf"))
            self._by_ts.rebuild(self.node_ts)

    def close_ready(self, now: float | None = None) -> list[Snapshot]:
        """Close the buckets every active node has moved past (also on the worker's wall-clock ticks: a fresh
        aggregator waits COLD_WAIT_S before its first close, and the backlog may have been read by then)."""
        if not self.node_ts or (now is not None and self.cold_until is not None and now < self.cold_until):
            return []  # a fresh aggregator in a worker: the nodes other workers forward are not known yet
        watermark = self._oldest_active(now)
        out: list[Snapshot] = []
        for b in sorted(self.buckets):
            end = b + self.bucket_s
            if end > watermark:
                break
            out.extend(self._close(b, self.buckets.pop(b), self.bucket_causes.pop(b, {})))
            self.closed_until = end
        return out

    def _oldest_active(self, now: float | None) -> float:
        """The oldest latest time of the nodes still reporting. A node counts until it is IDLE_S of event time
        behind the newest one *and*, in the worker, has sent nothing for IDLE_WALL_S: nodes whose partitions
        different workers run at different speeds are behind, not gone, and hold their buckets open. Kept by
        time (:class:`OldestLatest`), so an add does not walk the roster."""
        newest, seen_at = self._newest, self.seen_at

        def active(n: str, ts: float) -> bool:
            return newest - ts <= self.idle_s or (now is not None and now - seen_at.get(n, now) < IDLE_WALL_S)

        oldest = self._by_ts.oldest(self.node_ts, active)
        if oldest is None:  # node_ts was replaced from outside (not by add or restore): index it again
            self.__post_init__()
            newest = self._newest
            oldest = self._by_ts.oldest(self.node_ts, active)
        return newest if oldest is None else oldest

    def roster(self) -> dict:
        """What a worker that takes this key over needs to close buckets right (the nodes and how far each
        got, what was closed): JSON, stored in the model-state table next to the synthetic nodes' state."""
        return {"node_ts": dict(self.node_ts), "closed_until": self.closed_until, "prev_end": dict(self.prev_end)}

    def restore(self, roster: dict, now: float | None) -> None:
        """Take over a roster written by the worker that held this key before (see :meth:`roster`)."""
        self.node_ts = {str(n): float(t) for n, t in (roster.get("node_ts") or {}).items()}
        self.closed_until = float(roster.get("closed_until") or 0.0)
        self.prev_end = {str(k): float(v) for k, v in (roster.get("prev_end") or {}).items()}
        self._newest = max(self.node_ts.values(), default=float("-inf"))
        self._by_ts.rebuild(self.node_ts)
        if now is not None:
            self.seen_at = dict.fromkeys(self.node_ts, now)
            self.cold_until = now  # it knows the nodes: no wait

    @property
    def watermark(self) -> float | None:
        """Its next synthetic snapshots are dated after this: the end of the last closed bucket, or, before
        any closed, the start of the first open one (None while it holds nothing)."""
        if self.closed_until > 0:
            return self.closed_until
        return min(self.buckets) if self.buckets else None

    def _close(
        self, start: float, by_node: dict[str, list[Snapshot]], causes: dict[str, tuple[str, ...]]
    ) -> list[Snapshot]:
        end = start + self.bucket_s
        by_source: dict[str, list[Snapshot]] = {}
        for node in sorted(by_node):
            for snap in by_node[node]:
                by_source.setdefault(snap.source, []).append(snap)
                if self.peers is not None:
                    self.peers.add(snap, self.key)
        node = synthetic_node(self.key)
        explained = sum(1 for n in by_node if any(c not in _NOT_EXPLAINING for c in causes.get(n, ())))
        out = []
        for source in sorted(by_source):
            samples = merge(by_source[source], None if self.key == FLEET else self.key)
            if not samples:
                continue
            samples.append(GaugeSample.trusted(name=NODES_WITH_CAUSE, labels={}, value=float(explained)))
            if self.peers is not None:
                samples.extend(self.peers.gauges(end, source, self._explained_nodes(causes)))
            prev = self.prev_end.get(source)
            self.prev_end[source] = end
            labels = {} if self.key == FLEET else {"model_name": self.key}
            # built unchecked: every sample came from a validated snapshot, and a model's engines together may
            # have more samples than LIMITS.max_samples allows one node (the roster is bounded by max_nodes)
            out.append(
                Snapshot.model_construct(
                    ts=end,
                    node=node,
                    source=source,
                    interval_s=self.bucket_s,
                    labels=labels,
                    samples=samples,
                    prev_ts=prev,
                    gap=prev is not None and end - prev > self.bucket_s,
                )
            )
        return out

    def _explained_nodes(self, causes: dict[str, tuple[str, ...]]) -> frozenset[str]:
        """Nodes with an open cause that explains a slower engine, as of the closed buckets (each node's causes
        in the latest closed bucket it was in)."""
        self.closed_causes.update(causes)
        return frozenset(n for n, cs in self.closed_causes.items() if any(c not in PEER_NOT_EXPLAINING for c in cs))


def rescope(ev: IncidentEvent) -> IncidentEvent:
    """An incident of a synthetic node, scoped to its model (or the fleet) instead of a node."""
    node = ev.scope.node or ""
    if node != FLEET and not node.startswith("model:"):
        return ev
    model = None if node == FLEET else node.removeprefix("model:")
    engines = [e for e in (ev.scope.engine or "").split(",") if "/" in e]  # "<node>/<engine>": engine rules
    nodes = sorted({e.split("/", 1)[0] for e in engines})
    if len(nodes) == 1:  # one engine set apart from its peers: that node's incident
        scope = Scope(node=nodes[0], model=model, engine=",".join(sorted(e.split("/", 1)[1] for e in engines)) or None)
    else:
        scope = Scope(model=model, endpoint=ev.scope.endpoint, nodes=nodes)
    summary = ev.summary.replace(ev.scope.describe(), scope.describe())
    update: dict = {"scope": scope, "summary": summary}
    if scope.node:  # the actions were rendered with the synthetic node for {node}
        update["actions"] = [a.replace(node, scope.node) for a in ev.actions]
    return ev.model_copy(update=update)


class ModelStage:
    """Aggregators per key, and processors for the model-scope and the fleet-scope rules (offline replay
    uses it directly; the worker runs it in its model-stage agent). A key is only aggregated when some
    rule reads it: no fleet-scope rules, no fleet aggregation."""

    def __init__(
        self, rules: RuleSet, max_models: int | None = None, max_nodes: int | None = None, **processor_kw
    ) -> None:
        #: models by last arrival, per model-topic partition: over `max_models` the least recent is evicted
        self.recent = RecentNames(max_models)
        #: most nodes per aggregator (ModelAggregator.max_nodes)
        self.max_nodes = max_nodes
        #: told (kind, name) of every eviction (the worker counts and logs them)
        self.on_evict: Callable[[str, str], None] = lambda kind, name: None
        self.model_processor = SnapshotProcessor(RuleSet(rules=[]), **processor_kw)
        self.fleet_processor = SnapshotProcessor(RuleSet(rules=[]), **processor_kw)
        self.store = MemoryStateStore()
        self.aggregators: dict[str, ModelAggregator] = {}
        self.replace_rules(rules)

    def replace_rules(self, rules: RuleSet) -> None:
        """Judge the next closed buckets with `rules` (the model-stage rules of a reload; see
        :meth:`tailhound.streams.processor.SnapshotProcessor.replace_rules`)."""
        self.rules = rules
        fleet = [r for r in rules.rules if r.scope.value == "fleet"]
        model = [r for r in rules.rules if r.scope.value != "fleet"]  # model scope, and engines against peers
        self.model_rules = RuleSet(rules=model, files=rules.files)
        self.fleet_rules = RuleSet(rules=fleet, files=rules.files)
        self.model_processor.replace_rules(self.model_rules)
        self.fleet_processor.replace_rules(self.fleet_rules)
        #: the per-engine peer windows, only when some model-stage rule reads them
        reads_peers = any(s.startswith(MODEL_SIGNAL_PREFIX + "engine_") for r in model for s in r.signals())
        self._peer_histograms = peer_histograms(self.model_processor.catalog) if reads_peers else {}
        for key, agg in self.aggregators.items():
            if key != FLEET and (agg.peers is None) != (not self._peer_histograms):
                agg.peers = EnginePeerWindows(self._peer_histograms) if self._peer_histograms else None

    @property
    def enabled(self) -> bool:
        return bool(self.rules.rules)

    def keys(self, snapshot: Snapshot) -> list[str]:
        """The keys `snapshot` feeds here (each served model when model rules exist, the fleet when
        fleet rules exist)."""
        return model_keys(snapshot, models=bool(self.model_rules.rules), fleet=bool(self.fleet_rules.rules))

    def add(
        self,
        key: str,
        snapshot: Snapshot,
        causes: tuple[str, ...] = (),
        store=None,
        now: float | None = None,
        partition: int | None = None,
    ) -> list[IncidentEvent]:
        """Feed one engine snapshot (and the root causes open on its node; `now`: its wall-clock arrival in the
        worker) to `key`'s aggregator; run the rules on every bucket it closes. A worker that takes a key
        over (a failover, a rebalance) starts from the roster the previous one stored."""
        store = self.store if store is None else store
        gone = [ev for old in self.recent.touch(key, partition) for ev in self.evict(old, store, snapshot.ts)]
        agg = self.aggregators.get(key)
        if agg is None:
            peers = None if key == FLEET or not self._peer_histograms else EnginePeerWindows(self._peer_histograms)
            agg = self.aggregators[key] = ModelAggregator(
                key, peers=peers, max_nodes=self.max_nodes, on_evict=self.on_evict
            )
            roster = store.get(ROSTER_PREFIX + key)
            if isinstance(roster, dict):
                agg.restore(roster, now)
        return gone + self._judge(key, agg, agg.add(snapshot, causes, now), store)

    def evict(self, key: str, store, now: float) -> list[IncidentEvent]:
        """Forget `key` (over max_models, the least recently seen of the partition): its open incidents resolve
        ("node gone") at event time `now`, its aggregator goes and its stored state and roster are deleted (from
        the partition being processed: the key's own), so a restart does not bring it back."""
        self.aggregators.pop(key, None)
        node = synthetic_node(key)
        processor = self.fleet_processor if key == FLEET else self.model_processor
        events = [rescope(ev) for ev in processor.evict(node, store.get(node), now)]
        for stored in (node, ROSTER_PREFIX + key):
            if store.get(stored) is not None:
                del store[stored]
        self.on_evict(MODEL, key)
        return events

    def tick(self, keys: Iterable[str], now: float, store=None) -> list[IncidentEvent]:
        """Wall time passed (the worker's tick): close what the aggregators of `keys` can close now."""
        store = self.store if store is None else store
        return [
            ev
            for k in keys
            if (agg := self.aggregators.get(k)) is not None
            for ev in self._judge(k, agg, agg.close_ready(now), store)
        ]

    def _judge(self, key: str, agg: ModelAggregator, closed: list[Snapshot], store) -> list[IncidentEvent]:
        """Run the rules on the synthetic snapshots of closed buckets; store the key's roster when any closed."""
        events: list[IncidentEvent] = []
        processor = self.fleet_processor if key == FLEET else self.model_processor
        for synth in closed:
            step = processor.step(store.get(synth.node), synth)
            if step.changed:
                store[synth.node] = step.state
            events.extend(rescope(ev) for ev in step.events)
        if closed:
            store[ROSTER_PREFIX + key] = agg.roster()
        return events

    def watermark(self, keys: Iterable[str]) -> float | None:
        """The oldest :attr:`ModelAggregator.watermark` of `keys`: their next events are dated later (a
        progress marker for the roll-up's event-time order, :mod:`tailhound.streams.rollup.order`)."""
        marks = [m for k in keys if (agg := self.aggregators.get(k)) is not None and (m := agg.watermark) is not None]
        return min(marks) if marks else None

    def forget(self, keys: Iterable[str]) -> None:
        """Drop the aggregators of `keys` (their partition moved to another worker; if it comes back, they
        start over instead of closing stale buckets)."""
        for k in keys:
            self.aggregators.pop(k, None)
            self.recent.discard(k)

    def feed(self, snapshot: Snapshot, causes: tuple[str, ...] = ()) -> list[IncidentEvent]:
        """Offline: route one (node-stage) snapshot to every key it feeds."""
        if not self.enabled:
            return []
        return [ev for key in self.keys(snapshot) for ev in self.add(key, snapshot, causes)]
