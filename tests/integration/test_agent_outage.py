"""Broker outage: the agent keeps collecting while the broker is stopped for 30 s, then every snapshot
arrives exactly once and in order (the bundled broker keeps its data in memory, so it is paused with
SIGSTOP/SIGCONT rather than restarted)."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict

import pytest

from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget
from tailhound.agents.config import AgentConfig
from tailhound.agents.main import make_sender
from tailhound.agents.metrics import AgentMetrics
from tailhound.agents.runtime import Agent
from tailhound.broker import EmbeddedBroker
from tailhound.kafka import ensure_topics
from tailhound.settings import Settings
from tailhound.snapshot import Snapshot
from tailhound.wire import read_telemetry
from tests.http_helpers import FakeVllm, serve_metrics
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]

OUTAGE_S = 30.0


async def test_outage_of_30s_loses_nothing_and_keeps_order():
    phases: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()

    def phase(name: str) -> None:
        phases.append((name, round(loop.time(), 1)))

    try:
        async with asyncio.timeout(270):  # below pytest's 300 s, so a hang names its phase
            await _outage_scenario(phase)
    except TimeoutError:
        pytest.fail(f"the outage test hung; phases reached (loop time): {phases}")


async def _outage_scenario(phase) -> None:
    phase("start broker")
    with EmbeddedBroker() as broker:
        settings = Settings(broker=broker.url, topic_prefix=f"o{uuid.uuid4().hex[:6]}.", partitions=2)
        await ensure_topics(settings)
        metrics = AgentMetrics()
        config = AgentConfig(listen=None, publish={"batch_max": 50})
        sender = make_sender(settings, config, metrics)
        await sender.start()
        fakes = [FakeVllm(), FakeVllm()]
        emitted: list[Snapshot] = []

        def sink(snap: Snapshot) -> None:
            emitted.append(snap)
            sender.enqueue(snap)

        async with serve_metrics(fakes[0]) as url_a, serve_metrics(fakes[1]) as url_b:
            collectors = [
                ScrapeCollector(ScrapeTarget(job="vllm", url=url_a, interval_s=0.2), node="gpu-a"),
                ScrapeCollector(ScrapeTarget(job="vllm", url=url_b, interval_s=0.2), node="gpu-b"),
            ]
            agent = Agent(config, sink, metrics=metrics, collectors=collectors)
            phase("collect")
            stop = asyncio.Event()
            run = asyncio.create_task(agent.run(stop))
            await asyncio.sleep(2.0)
            sent_before = metrics.sent._value.get()
            phase("pause")
            broker.pause()
            try:
                await asyncio.sleep(OUTAGE_S)
                during = len(emitted)
                waiting = len(sender.outbox)
            finally:
                broker.resume()
                phase("resumed")
            await asyncio.sleep(2.0)
            stop.set()
            await asyncio.wait_for(run, 30)  # collectors stop within one interval
            phase("agent stopped")
        phase("servers closed")
        assert await sender.flush(timeout_s=90), f"{len(sender.outbox)} snapshot(s) never left the outbox"
        phase("flushed")
        await asyncio.wait_for(sender.stop(flush_timeout_s=1), 30)
        phase("sender stopped")

        assert sent_before > 0
        assert waiting >= OUTAGE_S / 0.2  # both nodes kept collecting into the outbox during the outage
        assert during > sent_before
        assert sender.outbox.dropped == 0 and metrics.dropped._value.get() == 0

        records = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= len(emitted), timeout=60)
        phase("consumed")
        got = read_telemetry(r.value for r in records)
        ids = [(s.node, s.ts) for s in got]
        assert len(ids) == len(set(ids)), "a snapshot arrived twice"
        assert sorted(ids) == sorted((s.node, s.ts) for s in emitted), "a snapshot is missing"
        by_partition: dict[int, list[Snapshot]] = defaultdict(list)
        for r, s in zip(records, got, strict=True):
            by_partition[r.partition].append(s)
        per_node: dict[str, list[float]] = defaultdict(list)
        for snaps in by_partition.values():
            for s in snaps:
                per_node[s.node].append(s.ts)
        for node, ts in per_node.items():
            assert ts == sorted(ts), f"{node}: out of order"
        # the deltas still chain without a gap: nothing was lost between collections
        for node in ("gpu-a", "gpu-b"):
            chain = [s for s in got if s.node == node]
            assert all(b.prev_ts == a.ts for a, b in zip(chain, chain[1:], strict=False))
