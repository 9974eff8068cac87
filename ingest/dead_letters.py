"""Rejects of the ingest path to the dead-letter topic, as the worker's bad telemetry goes there.

A remote-write body that is not remote write, series without a node label, a scrape over the snapshot
limits: each becomes a :class:`~tailhound.deadletter.DeadLetter` (reason, kind, stage, the bytes cut to
the dead letter's limit) keyed by its node when known. They are queued in memory, at most
:data:`MAX_QUEUED`; with the broker away longer than that holds, the oldest are dropped and counted
(``tailhound_ingest_dead_letters_dropped_total``): a dead letter is for people to look at, not a record
that must survive. Published by one task, in order, retried with back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tailhound.deadletter import DeadLetter
from tailhound.ingest.metrics import IngestMetrics
from tailhound.kafka import make_producer
from tailhound.settings import Settings

log = logging.getLogger("tailhound.ingest")

MAX_QUEUED = 1000
SEND_TIMEOUT_S = 10.0


class DeadLetterQueue:
    def __init__(
        self,
        settings: Settings,
        metrics: IngestMetrics,
        producer: AIOKafkaProducer | None = None,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        self.topic = settings.deadletter_topic
        self.metrics = metrics
        self._queue: deque[DeadLetter] = deque()
        self._max = max_queued
        self._settings = settings
        self._producer = producer  # made in the running loop when None
        self._started = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, letter: DeadLetter) -> None:
        log.warning("dead letter (%s, %s): %s", letter.stage, letter.kind, letter.reason)
        self._queue.append(letter)
        while len(self._queue) > self._max:
            self._queue.popleft()
            self.metrics.dead_letters_dropped.inc()
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ingest-dead-letters")

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            letter = self._queue[0]
            try:
                if not self._started:
                    if self._producer is None:
                        self._producer = make_producer(self._settings, request_timeout_ms=int(SEND_TIMEOUT_S * 1000))
                    await self._producer.start()
                    self._started = True
                async with asyncio.timeout(SEND_TIMEOUT_S):
                    await self._producer.send_and_wait(
                        self.topic, value=letter.encoded(), key=(letter.key or "").encode() or None
                    )
            except (KafkaError, TimeoutError, OSError) as exc:
                log.debug("dead letter not sent (%s); retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            if self._queue and self._queue[0] is letter:
                self._queue.popleft()
            self.metrics.dead_letters.inc()

    async def stop(self, flush_timeout_s: float = 2.0) -> None:
        """Send what is queued for up to `flush_timeout_s`, then stop (what is left is logged, not kept)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + flush_timeout_s
        while self._queue and self._task is not None and not self._task.done() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._queue:
            log.warning("%d dead letter(s) not published (the broker is away)", len(self._queue))
        if self._started and self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), timeout=1.0)
