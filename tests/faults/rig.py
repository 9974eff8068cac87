"""The rig of the broker and worker drills: the bundled broker on a fixed port, the streams worker as a
supervised child process (:meth:`WorkerProcess.supervise`, like systemd's ``Restart=on-failure``), an agent's
sender (outbox, acknowledged sends) fed with dcgm-exporter snapshots of two nodes, and read-backs of what
the broker holds.

One fleet tick every TICK_S wall seconds carries one snapshot per node, STEP_S of fleet time apart; while
``fleet.hot`` is set, GPUs 3 and 5 of gpu-node-2 run hot and slow (the thermal-throttle rule fires after a
minute of fleet time: 5 ticks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tailhound.agents.buffer import Outbox
from tailhound.agents.metrics import AgentMetrics
from tailhound.agents.sender import SnapshotSender
from tailhound.broker import EmbeddedBroker, free_port
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_consumer, servers
from tailhound.settings import Settings
from tailhound.wire import read_telemetry
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.worker_group import WorkerGroup

TICK_S = 0.25
STEP_S = 15.0
T0 = 1_767_225_600.0
NODES = ("gpu-node-1", "gpu-node-2")
HOT = {3: (88.0, 1100.0), 5: (87.0, 1150.0)}
#: the worker's notifier in the drills: short waits (fleet time runs 60x), pages printed to the worker's log
NOTIFIER_YAML = """
grouping: {wait: 1s, interval: 5s, repeat: 0s}
flap: {window: 60s, min_flip_interval: 1s}
route: {receiver: console}
receivers: [{type: console, name: console}]
"""

SnapId = tuple[str, float]


@dataclass(frozen=True)
class Emitted:
    at: float  # time.monotonic() when the agent collected it
    node: str
    ts: float


class Fleet:
    """Feeds the sender like an agent's collectors do (enqueue never waits)."""

    def __init__(self, sender: SnapshotSender, nodes: tuple[str, ...] = NODES) -> None:
        self.sender = sender
        self.nodes = nodes
        self.hot = False
        self.emitted: list[Emitted] = []
        self.ticks = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="drill-fleet")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while True:
            ts = T0 + STEP_S * self.ticks
            for node in self.nodes:
                snap = dcgm_snapshot(ts, node=node, hot=HOT if self.hot and node == "gpu-node-2" else None)
                self.emitted.append(Emitted(time.monotonic(), node, ts))
                self.sender.enqueue(snap)
            self.ticks += 1
            await asyncio.sleep(max(t0 + self.ticks * TICK_S - loop.time(), 0))

    def ids(self, after: float = float("-inf"), before: float = float("inf")) -> list[SnapId]:
        return [(e.node, e.ts) for e in self.emitted if after <= e.at < before]

    async def run_hot(self, ticks: int) -> None:
        """Node 2 runs hot for `ticks` ticks, then cools down."""
        self.hot = True
        start = self.ticks
        while self.ticks < start + ticks:
            await asyncio.sleep(TICK_S / 2)
        self.hot = False


class Rig:
    """Broker, worker, sender and fleet; an async context manager that stops them all."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        notifier: bool = False,
        partitions: int = 2,
        workers: int = 1,
        nodes: tuple[str, ...] = NODES,
        **streams: object,
    ) -> None:
        run = uuid.uuid4().hex[:6]
        self.tmp_path = tmp_path
        self.broker = EmbeddedBroker(port=free_port(), log_path=tmp_path / "broker.log")
        notifier_cfg = tmp_path / "notifier.yaml"
        notifier_cfg.write_text(NOTIFIER_YAML)
        self.settings = Settings(
            broker=self.broker.url,
            topic_prefix=f"d{run}.",
            partitions=partitions,
            streams={
                "app_id": f"drill-{run}",
                "data_dir": tmp_path / "streams",
                "log_level": "info",
                "web_listen": "127.0.0.1:0",
                "rollup_max_delay_s": 2.0,
                **streams,
            },
            sinks={"console": {"enabled": False}, "incident_topic": {"enabled": True}},
            notifier={"enabled": notifier, "config": notifier_cfg, "api_listen": "127.0.0.1:0", "tick_s": 0.2},
        )
        if workers == 1:
            self.workers = [WorkerProcess(self.settings, tmp_path / "worker.log", max_restarts=10)]
        else:  # a consumer group of several (tests/worker_group.py): own data directories, logs and ports
            self.group = WorkerGroup(self.settings, tmp_path, workers, max_restarts=10)
            self.workers = self.group.workers
        #: workers taken out of the rig (killed for good): not supervised, their logs still read
        self.retired: list[WorkerProcess] = []
        self.metrics = AgentMetrics()
        self.sender = SnapshotSender(self.settings, Outbox(), self.metrics, linger_ms=20)
        self.fleet = Fleet(self.sender, nodes)
        self._supervisor: asyncio.Task | None = None

    async def __aenter__(self) -> Rig:
        self.t_start = time.monotonic()
        self.broker.start()
        await ensure_topics(self.settings)
        for w in self.workers:
            w.start()
        self._supervisor = asyncio.create_task(self._supervise(), name="drill-supervisor")
        await self.sender.start()
        self.fleet.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.fleet.stop()
        if self._supervisor is not None:
            self._supervisor.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.sender.stop(flush_timeout_s=1.0), 10)
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            w.stop()
        self.broker.stop()

    def retire(self, worker: WorkerProcess) -> None:
        """Stop supervising `worker` (a drill killed it for good); its log still counts."""
        self.workers.remove(worker)
        self.retired.append(worker)

    @property
    def worker(self) -> WorkerProcess:
        """The first worker (the only one, unless the rig runs a group)."""
        return self.workers[0]

    async def _supervise(self) -> None:
        while True:
            for w in self.workers:
                w.supervise()
            await asyncio.sleep(0.2)

    @property
    def sent(self) -> int:
        return int(self.metrics.sent._value.get())

    # --- read-backs -------------------------------------------------------------------------------
    async def telemetry(self, timeout: float = 30.0) -> list[SnapId]:
        """Every snapshot the telemetry topic holds, in partition order (any wire version)."""
        records = await read_all(self.settings, self.settings.telemetry_topic, timeout)
        return [(s.node, s.ts) for s in read_telemetry(r.value for r in records)]

    async def incidents(self, timeout: float = 30.0) -> list[IncidentEvent]:
        records = await read_all(self.settings, self.settings.incidents_topic, timeout)
        return [IncidentEvent.model_validate_json(r.value) for r in records]

    def pages(self) -> list[str]:
        """The notifications the workers' console receivers printed (every worker's log, every start)."""
        out = []
        for w in [*self.retired, *self.workers]:
            with contextlib.suppress(OSError):
                out += [
                    line.strip()
                    for line in w.log_path.read_text(errors="replace").splitlines()
                    if line.startswith("notify ")
                ]
        return out

    async def wait_for(self, what: str, check, timeout: float, poll_s: float = 0.25) -> float:
        """Await `check()` (sync or async) becoming true; the time it took. Fails naming `what`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            result = check()
            if asyncio.iscoroutine(result):
                try:
                    result = await asyncio.wait_for(result, 10)
                except Exception:  # the broker may not answer yet: try again
                    result = False
            if result:
                return time.monotonic() - t0
            await asyncio.sleep(poll_s)
        tails = "\n".join(f"--- {w.log_path.name}\n{w.log_tail(25)}" for w in self.workers)
        raise AssertionError(f"{what}: not within {timeout:.0f} s; worker logs:\n{tails}")

    async def wait_caught_up(self, what: str, timeout: float) -> float:
        """Wait until the worker's group committed everything the telemetry topic held when this was called
        (the end offsets then; read again until the topic exists and holds something); the time it took."""
        t0 = time.monotonic()
        target: dict = {}

        async def reached() -> bool:
            nonlocal target
            ends, committed = await offsets(self.settings, self.settings.streams.app_id, self.settings.telemetry_topic)
            if not target:
                if not ends or sum(ends.values()) == 0:
                    return False
                target = ends
            return all(end == 0 or committed.get(tp, -1) >= end for tp, end in target.items())

        await self.wait_for(what, reached, timeout)
        return time.monotonic() - t0


async def offsets(settings: Settings, group: str, topic: str) -> tuple[dict, dict]:
    """(end offsets, the group's committed offsets) of every partition of `topic`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=servers(settings), client_id="drill-admin")
    consumer = make_consumer(settings, group_id=None)
    try:
        await admin.start()
        await consumer.start()
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return {}, {}
        ends = await consumer.end_offsets(tps)
        meta = await admin.list_consumer_group_offsets(group, partitions=tps)
        return ends, {tp: m.offset for tp, m in meta.items() if m is not None}
    finally:
        await consumer.stop()
        await admin.close()


async def read_all(settings: Settings, topic: str, timeout: float = 30.0) -> list:
    """Every record of `topic`, from its start to the end offsets read first."""
    consumer = make_consumer(settings, group_id=None)
    await consumer.start()
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            batch = await consumer.getmany(*tps, timeout_ms=250)
            for tp in tps:
                records.extend(batch.get(tp, []))
        return records
    finally:
        await consumer.stop()


def duplicates(ids: list[SnapId]) -> int:
    return len(ids) - len(set(ids))
