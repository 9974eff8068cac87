"""The node stage: one telemetry message in, the node's rule step, its events, forwards and watermarks out.

:class:`NodeStage` is what the ``evaluate`` agent (:func:`tailhound.streams.app.create_app`) does with each
message; the app only connects it to its topics and table, as :class:`~tailhound.streams.model_stage.ModelStage`
is connected to the ``model-stage`` agent:

- the gate admits the message (decoded within the limits, keyed by its node, dated near its arrival) or it is
  a dead letter with the reason;
- each admitted snapshot is stepped by :class:`~tailhound.streams.processor.SnapshotProcessor` on the node's
  stored state (held apart, redelivered, a bound of the state: each counted), its events go to the roll-up,
  engine snapshots are forwarded to the model stage with the node's open causes;
- the partition's watermark moves, and nodes of the partition silent for ``node_expiry_s`` expire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from types import SimpleNamespace
from typing import Any

from tailhound.snapshot import Snapshot

from . import codec, model_forward
from .fleet_cap import NODE
from .intake import EVALUATE_FAILED, DeadLetters, Gate, IntakeStats, NodeExpiry, Rejection, TimeBounds
from .model_forward import CAUSES_HEADER
from .model_stage import ModelStage
from .pipeline_metrics import PipelineMetrics
from .processor import SnapshotProcessor
from .rollup.agent import ProgressMarks
from .step_result import AHEAD_OF_SOURCE, OUT_OF_ORDER, Unprocessable

log = logging.getLogger(__name__)

Events = Callable[[list], Awaitable[None]]
Send = Callable[..., Awaitable[Any]]


class NodeStage:
    """The node stage of one worker: :meth:`handle` takes each telemetry message, in partition order."""

    def __init__(
        self,
        *,
        processor: SnapshotProcessor,
        state: MutableMapping[str, Any],
        gate: Gate,
        bounds: TimeBounds,
        letters: DeadLetters,
        stats: IntakeStats,
        expiry: NodeExpiry,
        marks: ProgressMarks,
        model_stage: ModelStage,
        forward: Send,
        stage: Events,
        partition_of: Callable[[str], int],
        max_nodes: int,
        metrics: PipelineMetrics | None = None,
        on_snapshot: Callable[[Snapshot], object] | None = None,
    ) -> None:
        self.processor, self.state, self.gate, self.bounds = processor, state, gate, bounds
        self.letters, self.stats, self.expiry, self.marks = letters, stats, expiry, marks
        self.model_stage, self.forward, self.stage, self.partition_of = model_stage, forward, stage, partition_of
        self.max_nodes, self.metrics, self.on_snapshot = max_nodes, metrics, on_snapshot

    async def handle(self, message: Any) -> None:
        """One telemetry message: one snapshot, or a bundle's (version 2/3) in order, as if they came one by one."""
        arrival = time.time()
        started = time.perf_counter()
        sent_at = _sent_at(message)
        values = self.gate.admit_all(message.value, message.key, arrival, sent_at)
        if isinstance(values, Rejection):
            await self.letters.publish(message, values.reason, values.stage, values.kind)
            return
        for value in values:
            stepped = await self._snapshot(message, values, value, arrival, sent_at)
            if stepped and self.metrics is not None:
                self.metrics.snapshot(value.source, time.perf_counter() - started)
                started = time.perf_counter()

    async def _snapshot(
        self, message: Any, values: list, value: Snapshot, arrival: float, sent_at: float | None = None
    ) -> bool:
        """One admitted snapshot through the step; False when it was not evaluated now (a dead letter, held)."""
        processor, stats = self.processor, self.stats
        if self.on_snapshot is not None:
            self.on_snapshot(value)
        for gone in processor.admit(value.node, message.partition):  # over streams.max_nodes
            await self.evict_node(gone, value.ts)
        try:
            result = processor.step(
                self.state.get(value.node),
                value,
                horizon=self.bounds.horizon(arrival),
                partition=message.partition,
                arrival=arrival,
                sent_at=sent_at,
            )
        except Unprocessable as exc:  # a bound of the node's state, or out of order: the snapshot is a dead letter
            await self._discard(message, exc.discarded)
            stats.reject(exc.kind)
            await self.letters.publish(message, str(exc), "time" if exc.kind == OUT_OF_ORDER else "evaluate", exc.kind)
            return False
        except Exception as exc:  # one bad snapshot must not stop the worker
            log.exception("evaluation failed for %s", value.node)
            stats.reject(EVALUATE_FAILED)
            await self.letters.publish(message, f"evaluation failed: {exc!r}", "evaluate", EVALUATE_FAILED)
            return False
        await self._discard(message, result.discarded)
        if result.held:
            stats.held += 1
            return False  # evaluated once the next snapshots of its source confirm it
        if result.redelivered:
            stats.redelivered += 1
        else:
            stats.accepted += 1
        if result.changed:
            self.state[value.node] = result.state
        await self.stage(result.events)
        await self._forward(message, value)
        if not result.redelivered:  # the partition's watermark, for the roll-up's event-time order
            await self.marks.node(message.partition, value.node, value.source, value.ts)
        if self.expiry.tick(message.partition, value.ts):
            await self.expire_nodes(message.partition)
        return True

    async def _discard(self, message: Any, discarded: list[Snapshot]) -> None:
        """Dead letters of snapshots held apart that the source went on without."""
        for lone in discarded:
            self.stats.reject(AHEAD_OF_SOURCE)
            await self.letters.publish(
                _held_message(message, lone),
                f"event time {lone.ts:.0f} was ahead of its source {lone.source!r} on {lone.node!r} and the next "
                "snapshot did not confirm it (settings streams.source_lead_tolerance_s, streams.max_source_jump_s)",
                "time",
                AHEAD_OF_SOURCE,
            )

    async def _forward(self, message: Any, value: Snapshot) -> None:
        """Engine snapshots also feed the model stage, keyed by model, with the node's open causes: only what it
        reads (:mod:`tailhound.streams.model_forward`)."""
        if not self.model_stage.enabled:
            return
        keys = self.model_stage.keys(value)
        if not keys:
            return
        causes = ",".join(self.processor.open_causes(value.node)).encode()
        forwarded = model_forward.encode(value)
        for key in keys:
            try:
                await self.forward(key=key.encode(), value=forwarded, headers={CAUSES_HEADER: causes})
                await self.marks.forwarded(key, value.ts)
            except Exception as exc:  # the node stage goes on without it
                self.stats.forward_failed += 1
                log.error(
                    "could not forward %s[%s]@%s to the model stage: %r",
                    message.topic,
                    message.partition,
                    message.offset,
                    exc,
                )

    async def expire_nodes(self, partition: int) -> None:
        """Nodes of `partition` silent for node_expiry_s: their incidents resolve ("node gone") and their state
        is deleted (in this partition's changelog: we are processing a message of it). Resolve first, then
        delete: a crash in between resolves again after the restart, with the same sequence numbers."""
        now = self.expiry.clock(partition)
        if now is None:
            return
        processor, state = self.processor, self.state
        stored = list(state.items())
        if processor.recent.cap:  # nodes restored from the changelog count for the cap before they send again
            processor.adopt(self.expiry.gone(partition, stored, self.partition_of, cutoff=float("inf")), partition)
        for node, seen in self.expiry.gone(partition, stored, self.partition_of):
            events = processor.expire(node, state.get(node), now, self.expiry.expiry_s)
            if events is None:
                continue  # it sent something the stored state does not show yet
            await self.stage(events)
            del state[node]
            self.gate.layouts.forget(node)
            self.stats.nodes_expired += 1
            self.stats.incidents_gone += len(events)
            log.info(
                "node %s expired: no telemetry for %.0f s of event time (streams.node_expiry_s %g s); "
                "%d open incidents resolved",
                node,
                now - seen,
                self.expiry.expiry_s,
                len(events),
            )

    async def evict_node(self, node: str, now: float) -> None:
        """`node` is over streams.max_nodes (the least recently seen of the partition being processed): its
        incidents resolve ("node gone") and its table entry is deleted, a tombstone in this partition's
        changelog, so a restart does not bring it back (tailhound.streams.fleet_cap)."""
        events = self.processor.evict(node, self.state.get(node), now)
        await self.stage(events)
        if node in self.state:
            del self.state[node]
        self.gate.layouts.forget(node)
        self.stats.incidents_gone += len(events)
        self.stats.evictions.evicted(NODE, node, self.max_nodes)


def _held_message(message: Any, snapshot: Snapshot) -> Any:
    """What a dead letter of a discarded held snapshot names: its own bytes, on the message's topic and partition
    (its offset is committed already)."""
    return SimpleNamespace(
        topic=message.topic,
        partition=message.partition,
        offset=None,
        key=snapshot.key(),
        value=codec.snapshot_json(snapshot),
    )


def _sent_at(message: Any) -> float | None:
    """The Kafka message timestamp in unix seconds (Faust gives seconds), None when there is none."""
    ts = getattr(message, "timestamp", None)
    return float(ts) if isinstance(ts, int | float) and ts > 0 else None
