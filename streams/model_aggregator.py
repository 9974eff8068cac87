"""Event-time buckets of the engine snapshots feeding one model (or the fleet), closed into synthetic snapshots.

A bucket of :data:`BUCKET_S` closes when every node that reported in the last :data:`IDLE_S` has moved past its end
(each node's snapshots arrive in order, so nothing more can land in it); a closed bucket becomes one synthetic
snapshot per source (node ``model:<name>`` or ``fleet``) that :class:`tailhound.streams.model_stage.ModelStage`
judges with the model- and fleet-scope rules.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from tailhound.snapshot import GaugeSample, Snapshot

from .engine_peers import NOT_EXPLAINING as PEER_NOT_EXPLAINING
from .engine_peers import EnginePeerWindows
from .fleet_cap import MODEL_NODE
from .model_merge import merge
from .rollup.watermarks import OldestLatest

BUCKET_S = 15.0
IDLE_S = 300.0
#: ... and, in the worker, sent nothing for this long (wall time): see ModelAggregator._oldest_active
IDLE_WALL_S = 60.0
#: a worker's aggregator that starts from nothing (no roster: a fresh deployment) closes no bucket for this many
#: wall seconds: the nodes whose partitions other workers run are forwarded from their first snapshots, and a
#: worker that reads a backlog faster than the others must not close buckets before it has heard of them
COLD_WAIT_S = 5.0
FLEET = "fleet"
NODES_WITH_CAUSE = "tailhound_model_nodes_with_cause"
#: node-level root causes that do not explain a model-wide queue (they are the same problem seen per node)
_NOT_EXPLAINING = frozenset({"capacity"})


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
