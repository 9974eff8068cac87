"""The agent: runs collectors on their intervals and turns what they collect into snapshots.

Where a metric enters tailhound: each collector's ``collect()`` returns scrape records (exposition
text, or a native collector's values: :mod:`tailhound.agents.collected`);
:class:`tailhound.agents.snapshot_builder.SnapshotBuilder`
turns every record into one snapshot; the sink (:class:`tailhound.agents.sender.SnapshotSender` for ``tailhound
agent``) publishes it. ``tailhound record`` writes the records to a recording instead (native values
rendered as text there), and :func:`replay` feeds a recording through the same builder, so record ->
replay gives identical snapshots.

Each collector runs in its own task on a fixed schedule (missed ticks are skipped, not bunched up;
collectors with the same interval share their ticks);
a slow or failing collector never delays another, and publishing never blocks collection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import IO

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import Collector, CollectorUnavailable, local_node
from tailhound.agents.config import AgentConfig
from tailhound.agents.metrics import AgentMetrics
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import Snapshot

log = logging.getLogger("tailhound.agent")

SnapshotSink = Callable[[Snapshot], None]
#: how long closing the collectors (their HTTP clients, NVML) may take when the agent stops
CLOSE_TIMEOUT_S = 1.0


def build_collectors(config: AgentConfig) -> list[Collector]:
    from tailhound.agents.collectors.hops import HopsCollector
    from tailhound.agents.collectors.nginx import NginxCollector
    from tailhound.agents.collectors.nvml import NvmlCollector
    from tailhound.agents.collectors.procnet import ProcNetCollector
    from tailhound.agents.collectors.scrape import ScrapeCollector
    from tailhound.agents.collectors.streamprobe import StreamProbeCollector
    from tailhound.agents.collectors.tcpconnect import TcpConnectCollector

    node = config.node
    out: list[Collector] = [ScrapeCollector(t, node=node) for t in config.scrape]
    if config.nvml is not None and config.nvml.enabled:
        out.append(NvmlCollector(config.nvml, node=node))
    if config.procnet is not None:
        out.append(ProcNetCollector(config.procnet, node=node))
    if config.tcp_connect is not None and config.tcp_connect.targets:
        out.append(TcpConnectCollector(config.tcp_connect, node=node))
    if config.hops is not None and config.hops.targets:
        out.append(HopsCollector(config.hops, node=node))
    # node: probes of this machine (a loopback URL) describe the agent's own node
    out.extend(NginxCollector(c, node=node) for c in config.nginx)
    out.extend(StreamProbeCollector(c, node=node) for c in config.stream_probe)
    return out


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        sink: SnapshotSink | None = None,
        *,
        recorder: IO[str] | None = None,
        metrics: AgentMetrics | None = None,
        collectors: list[Collector] | None = None,
    ) -> None:
        self.config = config
        self.node = config.node or local_node()
        self.sink = sink
        self.recorder = recorder
        self.metrics = metrics or AgentMetrics()
        self.builder = SnapshotBuilder()
        self.metrics.track_rejections(self.builder.rejected)
        self.collectors = collectors if collectors is not None else build_collectors(config)
        self.metrics.expect_jobs(c.job for c in self.collectors)  # /-/ready waits for each one's first run
        self.records = 0
        self._warned: set[str] = set()
        self._children: dict[str, tuple] = {}
        self._tasks: list[asyncio.Task] = []

    def emit(self, rec: ScrapeRecord | CollectedRecord) -> None:
        if self.config.labels:
            labels = {**self.config.labels, **rec.labels}
            rec = (
                rec.with_labels(labels)
                if isinstance(rec, CollectedRecord)
                else rec.model_copy(update={"labels": labels})
            )
        if self.recorder is not None:
            self.recorder.write(rec.to_line() + "\n")
        self.records += 1
        if self.sink is not None:
            self.sink(self.builder.build(rec))

    def _failure(self, c: Collector, ts: float, reason: str) -> list[ScrapeRecord]:
        """Gap records for a failed collection, on the same sources (node, job, labels) as its data."""
        make = getattr(c, "failure_records", None)
        if make is not None:
            return make(ts, reason)
        return [
            ScrapeRecord(
                ts=ts,
                node=getattr(c, "node", None) or self.node,
                job=c.job,
                labels=dict(getattr(c, "labels", None) or {}),
                interval_s=c.interval_s,
                error=reason,
            )
        ]

    def _job_metrics(self, job: str) -> tuple:
        """The (collections, errors, duration) children of one job (labels() takes a lock and a lookup)."""
        children = self._children.get(job)
        if children is None:
            m = self.metrics
            children = self._children[job] = (
                m.collections.labels(job),
                m.collect_errors.labels(job),
                m.collect_seconds.labels(job),
            )
        return children

    async def collect_once(self, c: Collector) -> bool:
        """One collection of `c`; False when the collector turned itself off."""
        ts = time.time()
        t0 = time.perf_counter()
        job = c.job
        collections, collect_errors, collect_seconds = self._job_metrics(job)
        limit = max(c.interval_s, 1.0) * 2
        try:
            async with asyncio.timeout(limit):  # not wait_for: no extra task per collection
                records = await c.collect()
        except CollectorUnavailable as exc:
            log.warning("%s", exc)
            self.metrics.collectors_off.inc()
            self.metrics.job_settled(job)
            return False
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any collector failure becomes a gap, never a crash
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, asyncio.TimeoutError):
                reason = f"collection took longer than {limit:g} s"
            if type(exc).__name__ != "CollectError" and job not in self._warned:
                self._warned.add(job)
                log.exception("%s collector failed unexpectedly (reported as a gap; logged once)", job)
            collect_errors.inc()
            records = self._failure(c, ts, reason)
        collections.inc()
        self.metrics.job_settled(job)
        collect_seconds.observe(time.perf_counter() - t0)
        for rec in records:
            self.emit(rec)
        return True

    async def _loop(self, c: Collector) -> None:
        """Collect at start, then on the multiples of the interval (of the loop's clock). Collectors with
        the same interval share the ticks, so the agent wakes once per tick for all of them (and their
        snapshots go out in one request) instead of once per collector a few microseconds apart."""
        loop = asyncio.get_running_loop()
        interval = c.interval_s
        while True:
            if not await self.collect_once(c):
                return
            now = loop.time()
            # the next tick after now: a collection that overran skips the missed ticks (gap flag shows them)
            await _sleep_until(loop, (now // interval + 1) * interval)

    def _start(self) -> None:
        if not self.collectors:
            log.warning("no collectors are enabled in the agent config")
        self._tasks = [asyncio.create_task(self._loop(c), name=f"collect-{c.job}") for c in self.collectors]

    async def _stop_collectors(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):  # bounded: SIGINT/SIGTERM stop the agent within a few seconds
            await asyncio.wait_for(
                asyncio.gather(*(c.close() for c in self.collectors), return_exceptions=True), CLOSE_TIMEOUT_S
            )

    async def reconfigure(self, config: AgentConfig) -> None:
        """Swap in the collectors, node and labels of `config` (a reload); the sink and its outbox stay.
        The new collectors are built before the old ones stop, so a config they refuse changes nothing."""
        collectors = build_collectors(config)
        running = bool(self._tasks)
        await self._stop_collectors()
        self.config, self.node, self.collectors = config, config.node or local_node(), collectors
        self._warned.clear()
        self.metrics.collectors_off.set(0)
        if running:
            self._start()

    async def run(self, stop: asyncio.Event | None = None, duration_s: float | None = None) -> None:
        stop = stop or asyncio.Event()
        self._start()
        try:
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait([waiter], timeout=duration_s)
            waiter.cancel()
        finally:
            await self._stop_collectors()


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """Sleep until the loop's clock reads `when` (asyncio.sleep takes a delay and re-reads the clock, so
    collectors aiming at the same tick would wake microseconds apart, each in a wakeup of its own)."""
    fut = loop.create_future()
    handle = loop.call_at(when, _wake, fut)
    try:
        await fut
    finally:
        handle.cancel()


async def paced(records: Iterable[ScrapeRecord], speed: float) -> AsyncIterator[ScrapeRecord]:
    """Yield records in file order; with speed > 0, at `speed` x their recorded pace."""
    loop = asyncio.get_running_loop()
    t0 = first = None
    for rec in records:
        if speed > 0:
            if first is None:
                first, t0 = rec.ts, loop.time()
            delay = t0 + max(0.0, rec.ts - first) / speed - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        yield rec


async def replay(
    records: Iterable[ScrapeRecord], sink: SnapshotSink, speed: float = 0.0, builder: SnapshotBuilder | None = None
) -> int:
    """Turn a recording back into snapshots (same builder as live collection); returns the count."""
    builder = builder or SnapshotBuilder()
    n = 0
    async for rec in paced(records, speed):
        sink(builder.build(rec))
        n += 1
        if n % 500 == 0:
            await asyncio.sleep(0)  # let the sender run
    return n
