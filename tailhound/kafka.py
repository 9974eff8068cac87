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


def topic_specs(settings: Settings) -> dict[str, tuple[int, dict[str, str]]]:
    """Every topic tailhound declares: name -> (partitions, topic configs). The incident topics have one
    partition: incident events are few, consumers get them in one order, and the roll-up and the notifier
    (one active instance each) read them all. (The worker's Faust app declares its own table changelogs.)"""
    compact = {"cleanup.policy": "compact"}
    return {
        settings.telemetry_topic: (settings.partitions, {}),
        settings.model_topic: (settings.partitions, {}),
        settings.node_incidents_topic: (1, {}),
        settings.incidents_topic: (1, {}),
        settings.deadletter_topic: (1, {}),
        settings.notifier_state_topic: (1, compact),
    }


async def ensure_topics(settings: Settings, extra: dict[str, int] | None = None) -> list[str]:
    """Create the telemetry, model-telemetry, node-incidents, incidents, dead-letter and notifier-state topics
    (:func:`topic_specs`, and `extra`) that do not exist; returns the names it created.

    Idempotent and cheap (one Metadata request when nothing is missing): the agent and the worker call it at
    start and again when their topics went missing (a fresh cluster, a deleted topic, the bundled broker
    restarted: it keeps topics in memory), because tailhound never lets the broker auto-create a topic
    (:func:`disable_topic_auto_creation`): an auto-created topic gets the broker's default partitions and
    configs (``num.partitions``, no compaction) instead of these."""
    disable_topic_auto_creation()
    wanted = topic_specs(settings)
    wanted.update({name: (n, {}) for name, n in (extra or {}).items()})
    rf = settings.replication_factor
    admin = AIOKafkaAdminClient(bootstrap_servers=servers(settings), client_id="tailhound-admin")
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        new = [
            NewTopic(name, num_partitions=n, replication_factor=rf, topic_configs=configs or None)
            for name, (n, configs) in wanted.items()
            if name not in existing
        ]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
        return [t.name for t in new]
    except KafkaError as exc:
        raise BrokerError(f"cannot create topics on {settings.broker}: {exc}") from exc
    finally:
        await admin.close()


async def existing_topics(settings: Settings) -> set[str]:
    """The topics the broker has now (one Metadata request; never creates one). Raises KafkaError."""
    disable_topic_auto_creation()
    admin = AIOKafkaAdminClient(bootstrap_servers=servers(settings), client_id="tailhound-admin")
    try:
        await admin.start()
        return set(await admin.list_topics())
    finally:
        await admin.close()


def disable_topic_auto_creation() -> None:
    """Make aiokafka's Metadata requests (of every client in this process: ours, Faust's) stop asking the
    broker to create the topics they name.

    aiokafka sends ``allow_auto_topic_creation=true`` with every Metadata request (v4+). A broker with
    ``auto.create.topics.enable`` (Kafka's default; the bundled one always) then creates a missing topic with
    its default partitions and no configs the moment a producer or consumer asks about it: after the bundled
    broker restarted, the roll-up's one-partition topics came back with four partitions and the
    notifier-state topic uncompacted. With this, a missing topic stays missing until
    :func:`ensure_topics` declares it as tailhound needs it. Idempotent."""
    import aiokafka.admin.client as admin_module
    import aiokafka.client as client_module

    for module in (client_module, admin_module):
        current = module.MetadataRequest
        if getattr(current, "tailhound_no_auto_create", False):
            continue

        class MetadataRequest(current):  # type: ignore[misc, valid-type]
            tailhound_no_auto_create = True

            def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = False):
                super().__init__(topics, allow_auto_topic_creation)

        module.MetadataRequest = MetadataRequest


def make_producer(settings: Settings, **kwargs: object) -> AIOKafkaProducer:
    disable_topic_auto_creation()
    opts: dict[str, object] = {"linger_ms": 20, "acks": "all", "enable_idempotence": False}
    opts.update(kwargs)
    return AIOKafkaProducer(bootstrap_servers=servers(settings), client_id="tailhound", **opts)


def make_consumer(settings: Settings, *topics: str, **kwargs: object) -> AIOKafkaConsumer:
    disable_topic_auto_creation()
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
