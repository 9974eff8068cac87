"""Bounded consume helpers for tests against the real broker."""

from __future__ import annotations

import asyncio
import time

from tailhound.kafka import make_consumer
from tailhound.settings import Settings


async def consume(settings: Settings, topic: str, until, timeout: float = 60.0, alive=None) -> list:
    """Read `topic` from the start until `until(records)` is true, `timeout` passes or `alive()` is false."""
    consumer = make_consumer(settings, topic, group_id=None)
    await consumer.start()
    records: list = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not until(records) and (alive is None or alive()):
            batch = await consumer.getmany(timeout_ms=250)
            for rs in batch.values():
                records.extend(rs)
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    return records


def any_resolved(records: list) -> bool:
    """`until` for :func:`consume` on the incidents topic: some incident resolved."""
    return any(b'"resolved"' in r.value for r in records)


async def until_resolved(settings: Settings, alive=None, timeout: float = 90.0) -> list:
    """The incident events read until one of them resolves (or `timeout`, or `alive()` false)."""
    from tailhound.incident import IncidentEvent

    records = await consume(settings, settings.incidents_topic, any_resolved, timeout=timeout, alive=alive)
    return [IncidentEvent.model_validate_json(r.value) for r in records]


async def publish_incidents(settings: Settings, *events) -> None:
    """Produce incident events to the incidents topic (key = incident id), as the streams worker does."""
    from tailhound.kafka import ensure_topics, make_producer

    await ensure_topics(settings)
    producer = make_producer(settings)
    await producer.start()
    try:
        for ev in events:
            await producer.send_and_wait(settings.incidents_topic, key=ev.key(), value=ev.model_dump_json().encode())
    finally:
        await producer.stop()
