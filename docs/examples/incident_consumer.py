"""Follow tailhound's incident topic: one line per incident lifecycle step, duplicates dropped.

Needs only aiokafka (``pip install aiokafka``); the topic's contract is docs/incident-topic.md.

    python docs/examples/incident_consumer.py --bootstrap localhost:19092 --topic tailhound.incidents
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer


def describe(scope: dict) -> str:
    parts = [f"node {scope['node']}"] if scope.get("node") else []
    parts += [f"GPUs {','.join(scope['gpus'])}"] if scope.get("gpus") else []
    parts += [f"{k} {scope[k]}" for k in ("model", "engine", "endpoint") if scope.get(k)]
    return " / ".join(parts) or "fleet"


async def follow(args: argparse.Namespace) -> None:
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=args.group is not None,
    )
    await consumer.start()
    latest: dict[str, int] = {}  # incident_id -> highest sequence handled
    printed = 0
    try:
        while printed != args.max_events:
            batch = await consumer.getmany(timeout_ms=int((args.until_idle or 1.0) * 1000))
            if not batch and args.until_idle:
                return  # nothing new for --until-idle seconds
            for record in (r for records in batch.values() for r in records):
                ev = json.loads(record.value)
                if ev["sequence"] <= latest.get(ev["incident_id"], 0):
                    continue  # a redelivery, or an older step published again after a newer one
                latest[ev["incident_id"]] = ev["sequence"]
                when = datetime.fromtimestamp(ev["ts"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                nature = "transient" if ev.get("transient") else "persistent"
                print(
                    f"{when} {ev['incident_id']} #{ev['sequence']} {ev['event']:<8} {ev['severity']:<8} "
                    f"{ev['root_cause']} on {describe(ev['scope'])} ({nature}): {ev.get('summary', '')}",
                    flush=True,
                )
                printed += 1
                if printed == args.max_events:
                    return
    finally:
        await consumer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092", help="Kafka bootstrap servers, host:port[,...]")
    parser.add_argument("--topic", default="tailhound.incidents")
    parser.add_argument("--group", help="consumer group: commit offsets and resume there (default: none)")
    parser.add_argument("--until-idle", type=float, help="stop after this many seconds without a message")
    parser.add_argument("--max-events", type=int, help="stop after printing this many events")
    asyncio.run(follow(parser.parse_args()))
