"""Reading a topic from its start to its current end: the notifier's compacted state (what a takeover
rebuilds from, what the CLI lists) and any topic's values (the CLI's incident listing).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from tailhound.incident import IncidentEvent
from tailhound.kafka import make_consumer
from tailhound.settings import Settings


async def read_state(settings: Settings, consumer: AIOKafkaConsumer | None = None) -> tuple[dict[str, Any], dict]:
    """Every key of the state topic with its latest value (None = deleted), and the end offsets read to."""
    own = consumer is None
    consumer = consumer or make_consumer(settings, group_id=None)
    if own:
        await consumer.start()
    try:
        topic = settings.notifier_state_topic
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer.topics()
            parts = consumer.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        items: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while await _behind(consumer, tps, ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end in 60 s")
            batch = await consumer.getmany(*tps, timeout_ms=500)
            for records in batch.values():
                for rec in records:
                    key = rec.key.decode() if rec.key else ""
                    items[key] = json.loads(rec.value) if rec.value else None
        return items, ends
    finally:
        if own:
            await consumer.stop()


async def _behind(consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: dict) -> bool:
    for tp in tps:
        if await consumer.position(tp) < ends[tp]:
            return True
    return False


async def read_topic(settings: Settings, topic: str, timeout_s: float = 30.0) -> list[bytes]:
    """Every value of `topic` from the beginning to its current end."""
    consumer = make_consumer(settings, group_id=None)
    await consumer.start()
    try:
        await consumer.topics()
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while await _behind(consumer, tps, ends) and time.monotonic() < deadline:
            for records in (await consumer.getmany(*tps, timeout_ms=500)).values():
                out.extend(r.value for r in records if r.value)
        return out
    finally:
        await consumer.stop()


def incident_events(settings: Settings) -> dict[str, list]:
    """The incidents topic's events by incident, each list once per sequence number and in order."""
    by_id: dict[str, list] = {}
    for raw in asyncio.run(read_topic(settings, settings.incidents_topic)):
        try:
            ev = IncidentEvent.model_validate_json(raw)
        except ValueError:
            continue
        events = by_id.setdefault(ev.incident_id, [])
        if all(e.sequence != ev.sequence for e in events):
            events.append(ev)
    for events in by_id.values():
        events.sort(key=lambda e: e.sequence)
    return by_id
