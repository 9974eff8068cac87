"""The Faust side of the roll-up and its event-time order (:mod:`tailhound.streams.rollup.order`).

- :class:`ProgressMarks`: the node and model stages publish their partitions' watermarks (progress
  markers) on the roll-up's topic, next to their incident events, and forget what they kept for the
  partitions that left this worker;
- :func:`add_rollup`: the ``rollup`` agent (one partition: one worker at a time runs it; its state, the
  open groups and the events waiting for their turn, is in a changelogged table) and the timer whose ticks
  give it wall time (the bound on how long an event waits).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import faust

from tailhound.incident import IncidentEvent

from ..intake import NOT_AN_INCIDENT
from ..intake_stats import IntakeStats
from ..model_aggregator import BUCKET_S
from ..model_stage import ModelStage
from ..pipeline_metrics import PipelineMetrics
from ..processor import SnapshotProcessor
from .incidents import RollupState, rollup
from .order import (
    MODEL_STAGE,
    NODE_STAGE,
    TICK_KEY,
    EventOrder,
    OrderState,
    is_control,
    parse_progress,
    progress_key,
)
from .watermarks import PartitionClock

log = logging.getLogger(__name__)

#: the roll-up's whole state lives under these keys of its one-partition table: the open groups ...
ROLLUP_KEY = "open-groups"
#: ... and the events waiting for their turn
ORDER_KEY = "event-order"


class ProgressMarks:
    """The watermarks this worker publishes for the partitions it runs (node stage: telemetry partitions;
    model stage: model-topic partitions), sent with `send(key, value)` to the roll-up's topic."""

    def __init__(
        self, send: Callable[..., Awaitable[Any]], enabled: bool, model_partition_of: Callable[[str], int] | None = None
    ) -> None:
        self.send = send
        self.enabled = enabled
        #: the model-topic partition a model-stage key goes to (the producer's partitioner)
        self.model_partition_of = model_partition_of
        self._held: set[str] = set()  # model-stage keys this worker forwarded to (and held the roll-up for)
        self.clock = PartitionClock()
        self.model_keys_at: dict[str, int] = {}  # model-stage key -> its model-topic partition
        self.model_marks: dict[int, float] = {}  # model-topic partition -> the watermark published last

    async def node(self, partition: int, node: str, source: str, ts: float) -> None:
        """The node stage accepted a snapshot of `partition`: publish the partition's watermark when due."""
        if not self.enabled:
            return
        mark = self.clock.observe(partition, node, source, ts)
        if mark is not None:  # nothing older will come from this partition
            await self.send(key=progress_key(NODE_STAGE, partition), value=repr(mark).encode())

    async def forwarded(self, key: str, ts: float) -> None:
        """The node stage forwarded an engine snapshot at `ts` to the model stage's `key`. The first time, it
        announces the key's model-topic partition to the roll-up with a hold (a bucket before the snapshot's):
        the model stage runs behind the node stage, and until its own first marker the roll-up would not know
        to wait for it."""
        if not self.enabled or key in self._held or self.model_partition_of is None:
            return
        self._held.add(key)
        hold = math.floor(ts / BUCKET_S) * BUCKET_S - BUCKET_S
        await self.send(key=progress_key(MODEL_STAGE, self.model_partition_of(key)), value=repr(hold).encode())

    def model_keys(self, partition: int) -> list[str]:
        """The model-stage keys this worker has seen on `partition`."""
        return [k for k, p in self.model_keys_at.items() if p == partition]

    async def model(self, partition: int, key: str, stage: ModelStage) -> None:
        """The model stage took a snapshot for `key` on `partition`: publish the partition's watermark when it
        moved."""
        self.model_keys_at[key] = partition  # (the model stage's ticks need it too)
        if not self.enabled:
            return
        mark = stage.watermark([k for k, p in self.model_keys_at.items() if p == partition])
        if mark is not None and mark > self.model_marks.get(partition, 0.0):
            self.model_marks[partition] = mark
            await self.send(key=progress_key(MODEL_STAGE, partition), value=repr(mark).encode())

    def reassigned(
        self,
        assigned: set,
        telemetry_topic: str,
        model_topic: str,
        partitions: int,
        processor: SnapshotProcessor,
        stage: ModelStage,
    ) -> None:
        """A rebalance gave this worker `assigned` (topic partitions): what is kept in memory for the partitions
        that left goes (another worker may change their state; if they come back it is read from the tables
        again), and their watermarks start over."""
        mine = {tp.partition for tp in assigned if tp.topic == telemetry_topic}
        self.clock.forget(self.clock.partitions() - mine)
        processor.forget_partitions(set(range(partitions)) - mine)
        mine_model = {tp.partition for tp in assigned if tp.topic == model_topic}
        moved = [k for k, p in self.model_keys_at.items() if p not in mine_model]
        stage.forget(moved)
        for k in moved:
            del self.model_keys_at[k]
        for p in set(self.model_marks) - mine_model:
            del self.model_marks[p]


def add_rollup(
    app: faust.App,
    topic: faust.TopicT,
    table: Any,
    order: EventOrder,
    publish: Callable[[list[IncidentEvent]], Awaitable[None]],
    dead_letter: Callable[..., Awaitable[None]],
    stats: IntakeStats,
    metrics: PipelineMetrics | None,
) -> None:
    """The ``rollup`` agent on `topic` (member events and control messages), its state in `table`."""

    @app.agent(topic, name="rollup")
    async def rollup_agent(stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            ordered = OrderState.model_validate(table.get(ORDER_KEY) or {})
            before = ordered.model_dump(mode="json")
            now = time.time()
            if is_control(message.key):  # a progress marker or a tick: release what it lets through
                marker = parse_progress(message.key, message.value)
                members = order.progress(ordered, *marker, now) if marker is not None else order.tick(ordered, now)
            else:
                try:
                    member = IncidentEvent.model_validate_json(message.value)
                except ValueError as exc:
                    stats.reject(NOT_AN_INCIDENT)
                    await dead_letter(message, f"not an incident event: {exc}", "rollup", NOT_AN_INCIDENT)
                    continue
                members = order.member(ordered, member, now)
            if metrics is not None:
                metrics.rollup_order_seen(ordered, len(members))
            after = ordered.model_dump(mode="json")
            if after != before:
                table[ORDER_KEY] = after
            if not members:
                continue
            current = RollupState.model_validate(table.get(ROLLUP_KEY) or {})
            out = [ev for m in members for ev in rollup(current, m)]
            table[ROLLUP_KEY] = current.model_dump(mode="json")
            await publish(out)

    if order.enabled:

        @app.timer(interval=min(1.0, max(0.1, order.max_delay_s / 5)))
        async def rollup_tick() -> None:
            """Wall time for the roll-up's bound on how long an event waits (whichever worker holds it). A tick
            that cannot be sent (the broker away or restarting) is skipped: the timer must outlive it, or events
            waiting for their turn would wait for the next member event (none, once a fleet goes quiet)."""
            await send_tick(topic.send(key=TICK_KEY, value=b""), "roll-up")


#: the longest one tick may take to be handed to the producer (a broker outage must not stall the timer)
TICK_SEND_S = 5.0


async def send_tick(sending: Awaitable[Any], what: str) -> None:
    """Await one tick's send; a failure or a send that takes more than TICK_SEND_S is logged and skipped."""
    try:
        await asyncio.wait_for(sending, TICK_SEND_S)
    except Exception as exc:  # the next tick follows within a second
        log.debug("%s tick not sent: %r", what, exc)
