"""Publishes snapshots to the telemetry topic (the simulator, the demo): one Kafka message per snapshot, keyed by
node, encoded by the agent's own encoder (:func:`tailhound.agents.wire.encoder`) and compressed as the agent's
sender compresses (lz4 at the fast level), so what they publish is what agents publish."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer

from tailhound.agents.sender import use_lz4_level
from tailhound.agents.wire import DEFAULT_WIRE, encoder
from tailhound.kafka import make_producer
from tailhound.settings import Settings
from tailhound.snapshot import Snapshot


class SnapshotPublisher:
    def __init__(
        self,
        settings: Settings,
        producer: AIOKafkaProducer | None = None,
        wire: int = DEFAULT_WIRE,
        layout_every_s: float = 0.0,
    ) -> None:
        self.topic = settings.telemetry_topic
        self._encode = encoder(wire, layout_every_s)
        if producer is None:
            use_lz4_level()
        self.producer = producer or make_producer(settings, compression_type="lz4")
        self.sent = 0
        self.bytes = 0

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Flush and close the producer, for at most `timeout_s` (what is not acknowledged by then is lost)."""
        with contextlib.suppress(Exception):  # TimeoutError, or a broker that went away
            await asyncio.wait_for(self.producer.stop(), timeout_s)

    async def publish(self, snapshots: Iterable[Snapshot]) -> None:
        """Send a batch and wait until the broker acknowledged every message of it."""
        futures = []
        for snap in snapshots:
            value = self._encode(snap)
            futures.append(await self.producer.send(self.topic, key=snap.key(), value=value))
            self.bytes += len(value)
        if futures:
            await asyncio.gather(*futures)
        self.sent += len(futures)

    async def __aenter__(self) -> SnapshotPublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
