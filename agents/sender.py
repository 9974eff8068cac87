"""Publishes snapshots from the outbox to the telemetry topic, in order, without blocking collection.

``enqueue()`` encodes a snapshot (one message per snapshot, key = node) into the :class:`Outbox` and
returns at once. One sender task moves batches from the outbox head to the producer (lz4) and removes
them only after the broker acknowledged the whole batch; on failure it waits and sends the same batch
again, so order is kept and nothing is skipped. When the outbox was empty, the sender waits
``linger_ms`` before taking a batch, so the snapshots of one tick (collectors share their ticks) go to
the broker in one request.

Bundles (``bundle=True``, agent.yaml ``publish.bundle``): consecutive snapshots of the node in a batch go out
as one telemetry message of version 2 (:class:`tailhound.snapshot.SnapshotBundle`, built from their encoded
bytes by :func:`bundle_batch`), so the worker pays its per-message cost once per node and tick instead of
once per source. Workers before bundles reject them (dead letter), so turn it on after the workers.

Wire version (``wire``, agent.yaml ``publish.wire``): 3 (the default) encodes each snapshot as compact MessagePack
(:mod:`tailhound.wire`), 1 as JSON; bundles of version-3 messages are version-3 messages of several parts
(:func:`tailhound.wire.bundle_parts`); ``layout_every_s`` (``publish.layout_every_s``) makes version 3 send
each source's layout once and reference it (:class:`tailhound.wire.v3.LayoutMemory`). The encoder is
:func:`tailhound.agents.wire.encoder`, the one every publisher uses.

Duplicates: the bundled broker (Tansu) has no idempotent producer, so the producer's own retries are
what carries a batch through a short outage: ``request_timeout_s`` (default 120 s) is longer than
the outages we ride out without re-sending. Only a batch whose request timed out after reaching the
broker can arrive twice; consumers ignore a snapshot whose (node, source, ts) they already saw.

Lost topics: a snapshot counts as sent only when the broker acknowledged it with an offset *after* the last
one it acknowledged on that partition. An acknowledgement at or before it means the partition's log was lost
(the bundled broker keeps everything in memory, and after a restart it even acknowledges writes to topics it
no longer has, which nobody can read; on Kafka: a topic deleted and recreated, an unclean leader election):
the sender then declares the topics (:func:`tailhound.kafka.ensure_topics`) and sends the batch again. It also
declares them before re-sending after any failed send, so a broker that came back empty gets its topics
before the buffered snapshots, with their partitions (tailhound never lets the broker auto-create a topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tailhound.agents.buffer import Message, Outbox
from tailhound.agents.metrics import PublishMetrics
from tailhound.agents.wire import DEFAULT_WIRE, encoder
from tailhound.kafka import ensure_topics, make_producer
from tailhound.settings import Settings
from tailhound.snapshot import LIMITS, Snapshot, bundle_bytes
from tailhound.wire.v3 import bundle_parts, is_v3

log = logging.getLogger("tailhound.agent.sender")

#: LZ4 level of the produced batches. aiokafka compresses lz4 at level 9 (LZ4-HC) and has no option for
#: it: 0.57 ms for one 8-GPU NVML snapshot (91 KB -> 5.2 KB) on the benchmark machine; LZ4's default
#: (fast) level takes 0.026 ms (-> 6.6 KB). Consumers and the broker read any level.
LZ4_LEVEL = 0


def use_lz4_level(level: int = LZ4_LEVEL) -> bool:
    """Make aiokafka's record-batch builders (the C one and the Python fallback) compress lz4 at `level`.

    Process-wide: it replaces ``lz4_encode`` where the builders look it up, keeping aiokafka's framing
    (no content checksum, independent blocks, as Kafka requires). False when aiokafka's layout differs
    (nothing is changed then)."""
    import cramjam
    from aiokafka import codec
    from aiokafka.record import default_records

    modules = [default_records]
    try:
        from aiokafka.record._crecords import default_records as c_records

        modules.append(c_records)
    except ImportError:  # pragma: no cover - aiokafka without its C extension
        pass
    if not codec.has_lz4() or not all(getattr(m, "lz4_encode", None) is not None for m in modules):
        return False

    def lz4_encode(payload: bytes, level: int = level) -> bytes:
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        compressor.compress(payload)
        return bytes(compressor.finish())

    for module in modules:
        module.lz4_encode = lz4_encode
    return True


#: aiokafka's per-partition batch (uncompressed bytes). Its default, 16 KiB, is smaller than one 8-GPU
#: NVML snapshot (~95 KB): every collection then went in a request of its own (~6 a second), and
#: aiokafka sends one batch per partition at a time. 512 KiB carries one tick of a node's snapshots
#: in one request; lz4 makes it ~10x smaller on the wire (the request limit is 1 MiB).
MAX_BATCH_BYTES = 512 << 10


#: how long handing a batch to the producer may take (it waits there for metadata of a topic the broker does
#: not have, up to its request timeout) before the sender declares the topics and tries again
ENQUEUE_TIMEOUT_S = 10.0
#: how long declaring the topics may take before the send is tried anyway
DECLARE_TIMEOUT_S = 10.0


#: the most bytes of snapshots one bundle message carries (a snapshot larger than this travels alone)
BUNDLE_MAX_BYTES = 256 << 10


def bundle_batch(
    batch: Sequence[Message], max_parts: int = LIMITS.max_bundle_snapshots, max_bytes: int = BUNDLE_MAX_BYTES
) -> list[Message]:
    """`batch` with each run of consecutive messages of one key (a node's snapshots of one tick) as one
    bundle message, at most `max_parts` snapshots and `max_bytes` of them each; a run of one stays as it is
    (version 1), so the order of every node's snapshots is kept."""
    out: list[Message] = []
    run: list[Message] = []
    size = 0

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            values = [m.value for m in run]
            node = run[0].key.decode()
            # a run is of one format: the sender encodes every snapshot with the same wire version
            value = bundle_parts(node, values) if is_v3(values[0]) else bundle_bytes(node, values)
            out.append(Message(key=run[0].key, value=value))
        run.clear()

    for m in batch:
        if run and (m.key != run[0].key or len(run) >= max_parts or size + len(m.value) > max_bytes):
            close()
        if not run:
            size = 0
        run.append(m)
        size += len(m.value)
    close()
    return out


class SnapshotSender:
    def __init__(
        self,
        settings: Settings,
        outbox: Outbox,
        metrics: PublishMetrics,
        *,
        batch_max: int = 500,
        linger_ms: int = 20,
        compression: str | None = "lz4",
        request_timeout_s: float = 120.0,
        producer: AIOKafkaProducer | None = None,
        declare_topics: Callable[[], Awaitable[Sequence[str] | None]] | None = None,
        bundle: bool = False,
        wire: int = DEFAULT_WIRE,
        layout_every_s: float = 0.0,
    ) -> None:
        self.topic = settings.telemetry_topic
        self.bundle = bundle
        self._encode = encoder(wire, layout_every_s)
        self.outbox, self.metrics, self.batch_max = outbox, metrics, batch_max
        # The sender lingers (below), not the producer: the producer would only see the snapshots the
        # sender handed it before awaiting their acknowledgement, so one tick's snapshots went out in
        # two or three requests.
        self._linger_s = linger_ms / 1000
        if compression == "lz4" and producer is None:
            use_lz4_level()
        self._producer = producer or make_producer(
            settings,
            compression_type=compression,
            linger_ms=0,
            request_timeout_ms=int(request_timeout_s * 1000),
            max_batch_size=MAX_BATCH_BYTES,
        )
        self._declare = declare_topics or (lambda: ensure_topics(settings))
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._enqueued_at: dict[int, float] = {}
        self._seq_in = self._seq_out = 0
        self._down_since: float | None = None
        self._dropped_seen = 0
        self._started = False
        #: declare the topics before the next send (at start, after a failure, after a lost log)
        self._check_topics = True
        self._must_declare = False
        #: the last offset the broker acknowledged, per partition of the telemetry topic
        self._last_offset: dict[int, int] = {}
        #: times the broker acknowledged offsets at or before ones it had acknowledged (its log was lost)
        self.log_resets = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="snapshot-sender")

    def enqueue(self, snap: Snapshot) -> None:
        self.outbox.append(Message(key=snap.key(), value=self._encode(snap)))
        self._enqueued_at[self._seq_in] = time.monotonic()
        self._seq_in += 1
        self.metrics.enqueued.inc()
        self._update_gauges()
        self._wake.set()

    def _update_gauges(self) -> None:
        self.metrics.outbox_messages.set(len(self.outbox))
        self.metrics.outbox_fill.set(self.outbox.fill_ratio)
        if self.outbox.dropped > self._dropped_seen:
            self.metrics.dropped.inc(self.outbox.dropped - self._dropped_seen)
            self._dropped_seen = self.outbox.dropped

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            batch = self.outbox.peek(self.batch_max)
            if not batch:
                self._wake.clear()
                await self._wake.wait()
                if self._linger_s > 0:  # let the other collections of this tick join the batch
                    await asyncio.sleep(self._linger_s)
                continue
            if self._check_topics:  # once per failure: a broker that lets us not declare is still sent to
                self._check_topics = False
                if not await self._declare_topics() and self._must_declare:
                    self._check_topics = True  # after a lost log, send nothing before the topics are back
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
            try:
                if not self._started:
                    await self._producer.start()
                    self._started = True
                async with asyncio.timeout(ENQUEUE_TIMEOUT_S):
                    messages = bundle_batch(batch) if self.bundle else batch
                    futures = [await self._producer.send(self.topic, value=m.value, key=m.key) for m in messages]
                acks = await asyncio.gather(*futures)
            except (KafkaError, TimeoutError) as exc:
                self._send_failed(
                    exc
                    if isinstance(exc, KafkaError)
                    else f"the producer took no message for {ENQUEUE_TIMEOUT_S:.0f} s (no metadata for {self.topic})"
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            lost = self._lost_log(acks)
            if lost:
                self.log_resets += 1
                log.warning(
                    "the broker lost the log of %s (%s): it restarted without its data, or the topic was "
                    "recreated; declaring the topics and sending the %d snapshot(s) again",
                    self.topic,
                    lost,
                    len(batch),
                )
                self._send_failed(lost)
                self._last_offset.clear()
                self._must_declare = True
                continue
            self.outbox.pop(len(batch))
            backoff = 0.5
            now = time.monotonic()
            for _ in batch:
                t = self._enqueued_at.pop(self._seq_out, None)
                self._seq_out += 1
                if t is not None:
                    self.metrics.send_latency.observe(now - t)
            self.metrics.sent.inc(len(batch))
            self.metrics.broker_up.set(1)
            if self._down_since is not None:
                log.warning(
                    "broker back after %.0f s; %d buffered snapshot(s) left", now - self._down_since, len(self.outbox)
                )
                self._down_since = None
            self._update_gauges()

    def _send_failed(self, why: object) -> None:
        self.metrics.send_errors.inc()
        self.metrics.broker_up.set(0)
        self._check_topics = True
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("broker unreachable (%s); buffering (%d waiting)", why, len(self.outbox))

    def _lost_log(self, acks: Sequence[object]) -> str:
        """Record the acknowledged offsets; a description when one is at or before an earlier one, else ''."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for ack in acks:
            offset = getattr(ack, "offset", None)
            partition = getattr(ack, "partition", None)
            if not isinstance(offset, int) or not isinstance(partition, int) or offset < 0:
                continue  # a test double, or a broker that does not report offsets
            first.setdefault(partition, offset)
            last[partition] = max(offset, last.get(partition, offset))
        for partition, offset in first.items():
            before = self._last_offset.get(partition)
            if before is not None and offset <= before:
                return f"partition {partition} acknowledged offset {offset} after {before}"
        self._last_offset.update(last)
        return ""

    async def _declare_topics(self) -> bool:
        try:
            async with asyncio.timeout(DECLARE_TIMEOUT_S):
                created = await self._declare()
        except Exception as exc:  # unreachable, or not allowed to create: the send finds out
            log.debug("could not declare the topics: %s", exc)
            return False
        self._must_declare = False
        if created:
            log.warning("declared the missing topic(s) %s", ", ".join(created))
        return True

    async def flush(self, timeout_s: float) -> bool:
        """Wait until the outbox is empty (True) or `timeout_s` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while len(self.outbox) and time.monotonic() < deadline:
            self._wake.set()
            await asyncio.sleep(0.05)
        return not len(self.outbox)

    async def stop(self, flush_timeout_s: float = 2.0, producer_timeout_s: float = 1.0) -> None:
        """Flush for up to `flush_timeout_s`, persist what is left (``spill_file``), close the producer (up to
        `producer_timeout_s`): bounded, so SIGINT/SIGTERM stops the agent in a few seconds even with the broker
        gone."""
        await self.flush(flush_timeout_s)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        left = self.outbox.persist()
        if left:
            log.warning("%d snapshot(s) not yet sent were saved to %s", left, self.outbox.spill_file)
        elif len(self.outbox):
            log.warning("%d snapshot(s) not yet sent are lost (no spill_file configured)", len(self.outbox))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._producer.stop(), timeout=producer_timeout_s)
