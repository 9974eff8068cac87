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

from collections.abc import Callable, Iterable

from tailhound.incident import IncidentEvent, Scope
from tailhound.snapshot import Snapshot

from .engine_peers import EnginePeerWindows, peer_histograms
from .fleet_cap import MODEL, RecentNames
from .model_aggregator import FLEET, ModelAggregator, synthetic_node
from .processor import MemoryStateStore, SnapshotProcessor
from .ruleset.rulefile import Rule, RuleSet

ENGINE_SOURCES = frozenset({"vllm", "tgi", "nim", "sglang"})
MODEL_SCOPES = frozenset({"model", "fleet"})
#: model-state table key of an aggregator's roster (ModelAggregator.roster)
ROSTER_PREFIX = "aggregator:"


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
