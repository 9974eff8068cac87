"""Small aiokafka helpers shared by the CLI, the demo, the agents and the tests."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from tailhound.broker import EmbeddedBroker
from tailhound.errors import BrokerError
from tailhound.settings import Settings, bootstrap_servers

log = logging.getLogger(__name__)


@contextlib.contextmanager
def broker_for(settings: Settings, log_path: str | None = None) -> Iterator[Settings]:
    """Yield settings with a reachable broker: the configured one, or the embedded one started here."""
    if settings.broker:
        yield settings
        return
    with EmbeddedBroker(log_path=log_path) as broker:
        log.info("started the embedded broker at %s", broker.url)
        yield settings.model_copy(update={"broker": broker.url})


def servers(settings: Settings) -> list[str]:
    if not settings.broker:
        raise BrokerError("no broker configured (set TAILHOUND_BROKER=kafka://host:9092)")
    return bootstrap_servers(settings.broker)


async def ensure_topics(settings: Settings, extra: dict[str, int] | None = None) -> None:
    """Create the telemetry, model-telemetry, node-incidents, incidents, dead-letter and notifier-state topics
    (and `extra`) if they do not exist. The incident topics have one partition: incident events are few,
    consumers get them in one order, and the roll-up and the notifier (one active instance each) read them all."""
    wanted = {settings.telemetry_topic: settings.partitions, settings.model_topic: settings.partitions,
              settings.node_incidents_topic: 1, settings.incidents_topic: 1,
              settings.deadletter_topic: 1, settings.notifier_state_topic: 1, **(extra or {})}
    admin = AIOKafkaAdminClient(bootstrap_servers=servers(settings), client_id="tailhound-admin")
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        new = [NewTopic(name, num_partitions=n, replication_factor=1,
                        topic_configs={"cleanup.policy": "compact"} if name == settings.notifier_state_topic else None)
               for name, n in wanted.items() if name not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
    except KafkaError as exc:
        raise BrokerError(f"cannot create topics on {settings.broker}: {exc}") from exc
    finally:
        await admin.close()


def make_producer(settings: Settings, **kwargs: object) -> AIOKafkaProducer:
    opts: dict[str, object] = {"linger_ms": 20, "acks": "all", "enable_idempotence": False}
    opts.update(kwargs)
    return AIOKafkaProducer(bootstrap_servers=servers(settings), client_id="tailhound", **opts)


def make_consumer(settings: Settings, *topics: str, **kwargs: object) -> AIOKafkaConsumer:
    opts: dict[str, object] = {"auto_offset_reset": "earliest", "enable_auto_commit": False}
    opts.update(kwargs)
    return AIOKafkaConsumer(*topics, bootstrap_servers=servers(settings), **opts)


async def group_lag(settings: Settings, group: str, topic: str) -> int | None:
    """Messages of `topic` the consumer group `group` has not committed yet (None: not known yet)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=servers(settings), client_id="tailhound-admin")
    consumer = AIOKafkaConsumer(bootstrap_servers=servers(settings), enable_auto_commit=False)
    try:
        await admin.start()
        await consumer.start()
        await consumer.topics()  # fetches cluster metadata, so a topic created a moment ago is known
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if not tps:
            return None
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        lag = 0
        for tp in tps:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            lag += max(ends[tp] - done, 0)
        return lag
    finally:
        await consumer.stop()
        await admin.close()
