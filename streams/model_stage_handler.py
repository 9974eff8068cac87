"""The model stage in the worker: one model-topic message in, closed buckets judged, their events and watermarks out.

:class:`ModelStageHandler` is what the ``model-stage`` agent (:func:`tailhound.streams.app.create_app`) does with
each message of ``<prefix>model-telemetry``, as :class:`tailhound.streams.node_stage.NodeStage` is for telemetry:

- a forwarded engine snapshot (:mod:`tailhound.streams.model_forward`, keyed by model) is added to the key's
  aggregator with the causes open on its node (a header), and the buckets it closes are judged;
- a tick (key :data:`tailhound.streams.rollup.order.TICK_KEY`, sent every second by the app's timer) lets the
  partition's aggregators close on wall time what they held back;
- the events go to the roll-up, the partition's watermark moves; a bucket that cannot be judged is counted
  (``model_stage_failed``) and logged, never fatal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from . import model_forward
from .intake import MODEL_STAGE_FAILED, IntakeStats
from .model_forward import CAUSES_HEADER
from .model_stage import ModelStage
from .pipeline_metrics import PipelineMetrics
from .rollup.agent import ProgressMarks
from .rollup.order import TICK_KEY

log = logging.getLogger(__name__)

Events = Callable[[list], Awaitable[None]]


class ModelStageHandler:
    """The model stage of one worker: :meth:`handle` takes each model-topic message, in partition order."""

    def __init__(
        self,
        *,
        model_stage: ModelStage,
        store: MutableMapping[str, Any],
        marks: ProgressMarks,
        stats: IntakeStats,
        stage: Events,
        metrics: PipelineMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model_stage, self.store, self.marks, self.stats = model_stage, store, marks, stats
        self.stage, self.metrics, self.clock = stage, metrics, clock

    async def handle(self, message: Any) -> None:
        """One model-topic message: a tick, or a forwarded engine snapshot."""
        if not message.key:
            return
        if message.key == TICK_KEY:
            await self.tick(message.partition)
            return
        value = model_forward.decode(message.value)
        if value is None:
            return  # the node stage validated it already; nothing malformed gets here
        key = message.key.decode()
        started = time.perf_counter()
        try:
            events = self.model_stage.add(
                key, value, causes(message.headers), store=self.store, now=self.clock(), partition=message.partition
            )
        except Exception:  # one bad bucket must not stop the worker
            log.exception("model stage failed for %s", message.key)
            self.stats.reject(MODEL_STAGE_FAILED)
            return
        finally:
            if self.metrics is not None:
                self.metrics.model_stage_seconds += time.perf_counter() - started
        await self.stage(events)
        await self.marks.model(message.partition, key, self.model_stage)

    async def tick(self, partition: int) -> None:
        """Wall time: a fresh aggregator of `partition` may close what it held back."""
        keys = self.marks.model_keys(partition)
        try:
            events = self.model_stage.tick(keys, self.clock(), store=self.store)
        except Exception:  # a bucket that cannot be judged must not stop the worker
            log.exception("model stage tick failed for partition %s", partition)
            self.stats.reject(MODEL_STAGE_FAILED)
            return
        await self.stage(events)
        if keys:
            await self.marks.model(partition, keys[0], self.model_stage)


def causes(headers: Any) -> tuple[str, ...]:
    """The node causes a forward carries in its :data:`CAUSES_HEADER` (a dict or a list of pairs)."""
    items = headers.items() if isinstance(headers, dict) else (headers or [])
    for k, v in items:
        if k == CAUSES_HEADER and v:
            return tuple(c for c in (v.decode() if isinstance(v, bytes) else str(v)).split(",") if c)
    return ()
