"""The sender: one batch per tick (it lingers, not the producer), lz4 at its fast level."""

from __future__ import annotations

import asyncio
import json
import time

import cramjam

from tailhound.agents.buffer import Outbox
from tailhound.agents.metrics import AgentMetrics
from tailhound.agents.sender import SnapshotSender, use_lz4_level
from tailhound.settings import Settings
from tailhound.snapshot import GaugeSample, Snapshot
from tailhound.wire import read_telemetry


class FakeProducer:
    """Records what is sent, request by request (everything handed over before an await)."""

    def __init__(self) -> None:
        self.requests: list[list[bytes]] = []
        self._current: list[bytes] | None = None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, topic, value=None, key=None):
        if self._current is None:
            self._current = []
            self.requests.append(self._current)
            asyncio.get_running_loop().call_soon(self._flush)
        self._current.append(value)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    def _flush(self) -> None:
        self._current = None


def snap(i: int) -> Snapshot:
    return Snapshot(ts=1000.0 + i, node="n1", source="nvml", samples=[GaugeSample(name="g", value=float(i))])


async def test_snapshots_of_one_tick_go_in_one_request():
    producer = FakeProducer()
    sender = SnapshotSender(Settings(), Outbox(), AgentMetrics(), linger_ms=50, producer=producer)
    await sender.start()
    await asyncio.sleep(0)  # the sender waits for the first snapshot
    try:
        sender.enqueue(snap(0))
        await asyncio.sleep(0.01)  # the other collections of the tick finish a little later
        sender.enqueue(snap(1))
        await asyncio.sleep(0.01)
        sender.enqueue(snap(2))
        assert await sender.flush(2.0)
        assert [len(r) for r in producer.requests] == [3]
        sender.enqueue(snap(3))  # the next tick
        assert await sender.flush(2.0)
        assert [len(r) for r in producer.requests] == [3, 1]
    finally:
        await sender.stop(flush_timeout_s=0)
    assert sender.metrics.sent._value.get() == 4


def test_lz4_batches_at_the_fast_level_still_decode():
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from aiokafka.record.memory_records import MemoryRecords

    assert use_lz4_level(0)
    value = snap(1).model_dump_json().encode() * 50
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=3,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=None, key=b"n1", value=value, headers=[])
    batch = MemoryRecords(bytes(builder.build())).next_batch()
    assert [(r.key, r.value) for r in batch] == [(b"n1", value)]
    fast = cramjam.lz4.Compressor(level=0, content_checksum=False, block_linked=False)
    fast.compress(value)
    assert len(bytes(builder.build())) < len(value) // 5 and len(bytes(fast.finish())) > 0


class RestartingProducer:
    """Acknowledges every send with the next offset of partition 0; `restart()` empties the log like a broker
    with memory storage (it acknowledges from offset 0 again, into a log nobody can read until the topics are
    declared again)."""

    def __init__(self) -> None:
        self.log: list[bytes] = []  # what a consumer could read
        self.phantom: list[bytes] = []  # acknowledged into a topic the broker no longer has
        self.topic_exists = True
        self.next_offset = 0

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def restart(self) -> None:
        self.topic_exists = False
        self.next_offset = 0

    async def send(self, topic, value=None, key=None):
        from types import SimpleNamespace

        (self.log if self.topic_exists else self.phantom).append(value)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(SimpleNamespace(partition=0, offset=self.next_offset))
        self.next_offset += 1
        return fut


async def test_acks_into_a_lost_log_are_not_counted_and_the_batch_goes_again_after_declaring_the_topics():
    producer = RestartingProducer()
    declared: list[float] = []

    async def declare():
        declared.append(time.monotonic())
        if not producer.topic_exists:
            producer.topic_exists = True
            return ["telemetry"]
        return []

    sender = SnapshotSender(
        Settings(), Outbox(), AgentMetrics(), linger_ms=0, producer=producer, declare_topics=declare
    )
    await sender.start()
    try:
        for i in range(5):
            sender.enqueue(snap(i))
        assert await sender.flush(2.0)
        assert len(producer.log) == 5 and len(declared) == 1  # declared once at start
        producer.restart()  # the broker came back empty: it acknowledges offsets 0.. into nothing
        for i in range(5, 8):
            sender.enqueue(snap(i))
        assert await sender.flush(5.0)
    finally:
        await sender.stop(flush_timeout_s=0)
    assert len(producer.phantom) == 3, "the first batch after the restart went into the lost log"
    assert [s.ts for s in read_telemetry(producer.log)] == [1000.0 + i for i in range(8)], "re-sent in order"
    assert len(declared) == 2 and sender.log_resets == 1
    assert sender.metrics.sent._value.get() == 8, "only what the broker kept counts as sent"


def other_node(i: int) -> Snapshot:
    return Snapshot(ts=1000.0 + i, node="n2", source="dcgm", samples=[GaugeSample(name="g", value=float(i))])


async def test_bundling_sends_one_message_per_node_and_tick_that_the_worker_decodes_in_order():
    """Version-2 bundles, of version-1 snapshots (``publish.wire: 1``); version 3's: tests/wire/test_v3_publishers."""
    from tailhound.streams.codec import decode_message

    producer = FakeProducer()
    sender = SnapshotSender(Settings(), Outbox(), AgentMetrics(), linger_ms=50, producer=producer, bundle=True, wire=1)
    await sender.start()
    await asyncio.sleep(0)
    try:
        for s in (snap(0), snap(1), other_node(2), snap(3)):
            sender.enqueue(s)
        assert await sender.flush(2.0)
    finally:
        await sender.stop(flush_timeout_s=0)
    [request] = producer.requests
    assert len(request) == 3  # n1 (2 snapshots), n2, n1: runs of one node only, so every node's order is kept
    decoded = [decode_message(v) for v in request]
    assert [[(s.node, s.ts) for s in parts] for parts in decoded] == [
        [("n1", 1000.0), ("n1", 1001.0)],
        [("n2", 1002.0)],
        [("n1", 1003.0)],
    ]
    assert [parts.bundled for parts in decoded] == [True, False, False]  # a run of one stays version 1
    assert sender.metrics.sent._value.get() == 4  # snapshots, not messages


def test_bundle_batch_bounds_parts_and_bytes():
    from tailhound.agents.buffer import Message
    from tailhound.agents.sender import bundle_batch

    batch = [Message(key=b"n1", value=snap(i).model_dump_json(exclude_none=True).encode()) for i in range(5)]
    assert [json.loads(m.value).get("schema_version") for m in bundle_batch(batch, max_parts=2)] == [2, 2, 1]
    size = len(batch[0].value)
    assert [len(json.loads(m.value).get("snapshots", [0])) for m in bundle_batch(batch, max_bytes=3 * size)] == [3, 2]
    assert bundle_batch(batch, max_parts=1) == batch
