"""One encoder for every publisher: the agent's sender (and so the ingest's) and the simulator's publisher
publish version 3 when asked (``publish.wire: 3``), and the worker's decoder reads what they publish."""

from __future__ import annotations

import asyncio

import pytest

from tailhound.agents.buffer import Outbox
from tailhound.agents.config import parse_agent_config
from tailhound.agents.metrics import AgentMetrics
from tailhound.agents.publisher import SnapshotPublisher
from tailhound.agents.sender import SnapshotSender
from tailhound.agents.wire import encode_snapshot, encoder
from tailhound.settings import Settings
from tailhound.snapshot import CounterSample, GaugeSample, Snapshot
from tailhound.streams.codec import decode_message
from tailhound.wire import encode_message, is_v3, snapshot_json
from tests.agents.test_sender import FakeProducer


def snap(i: int, node: str = "n1", source: str = "nvml") -> Snapshot:
    return Snapshot(
        ts=1000.0 + i,
        node=node,
        source=source,
        interval_s=1.0,
        samples=[
            GaugeSample(name="g", labels={"gpu": "0"}, value=float(i) + 0.5),
            CounterSample(name="c_total", labels={"gpu": "0"}, value=10.0 * i, delta=10.0 if i else None),
        ],
    )


def test_the_encoder_of_each_version():
    assert encoder(1) is encode_snapshot and encoder(3) is encode_message
    assert encoder() is encode_message  # version 3 is the default of every publisher
    with pytest.raises(ValueError, match="version 2"):
        encoder(2)


def test_agent_config_publishes_wire_3_by_default_takes_1_and_refuses_other_versions():
    assert parse_agent_config("{}\n").publish.wire == 3
    assert parse_agent_config("publish: {wire: 1}\n").publish.wire == 1
    with pytest.raises(Exception, match="wire"):
        parse_agent_config("publish: {wire: 2}\n")


@pytest.mark.parametrize("bundle", [False, True])
async def test_the_sender_publishes_version_3_that_the_worker_reads(bundle):
    producer = FakeProducer()
    sender = SnapshotSender(
        Settings(), Outbox(), AgentMetrics(), linger_ms=20, producer=producer, bundle=bundle, wire=3
    )
    await sender.start()
    await asyncio.sleep(0)
    try:
        for i in range(3):
            sender.enqueue(snap(i, node="n1" if i < 2 else "n2"))
        assert await sender.flush(2.0)
    finally:
        await sender.stop(flush_timeout_s=0)
    [request] = producer.requests
    assert all(is_v3(v) for v in request)
    decoded = [decode_message(v) for v in request]
    assert [len(parts) for parts in decoded] == ([2, 1] if bundle else [1, 1, 1])
    read = [Snapshot.model_validate_json(snapshot_json(p)) for parts in decoded for p in parts]
    assert read == [snap(0), snap(1), snap(2, node="n2")]


class _Future:
    def __await__(self):
        yield from ()
        return None


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes]] = []

    async def send(self, topic, key=None, value=None):
        self.sent.append((key, value))
        return _Future()


async def test_the_simulator_publisher_uses_the_same_encoder():
    for wire in (1, 3):
        producer = _Producer()
        pub = SnapshotPublisher(Settings(), producer=producer, wire=wire)
        await pub.publish([snap(0), snap(1)])
        assert [v for _k, v in producer.sent] == [encoder(wire)(snap(0)), encoder(wire)(snap(1))]
        assert pub.sent == 2 and pub.bytes == sum(len(v) for _k, v in producer.sent)
