"""``tailhound demo``: the whole path on one machine.

Embedded broker (unless one is configured) -> Faust worker (a child process, as in production) ->
a simulated 4-node fleet whose node 2 develops a thermal throttle on GPUs 3 and 5 after a 20-minute
warm-up -> the notifier (here in this process, with a console receiver) pages once when the incident
opens and once when it resolves -> a summary. One hour of fleet time runs in about a minute, so the
notifier's waits are shortened to match (:data:`DEMO_NOTIFIER`).
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tailhound.agents.publisher import SnapshotPublisher
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.errors import TailhoundError
from tailhound.incident import IncidentEvent
from tailhound.kafka import broker_for, ensure_topics, group_lag, make_consumer
from tailhound.notifier.config import parse_config
from tailhound.notifier.receivers.console import ConsoleConfig, ConsoleReceiver
from tailhound.notifier.service import NotifierService
from tailhound.settings import Settings, SinksSettings
from tailhound.worker.process import WorkerProcess

DEMO_FAULT = "thermal-throttle@20m+20m:node=gpu-node-2:gpus=3,5"
#: the notifier's config for the demo: fleet time runs 60x, so its waits (in wall time) are short
DEMO_NOTIFIER = """
grouping: {wait: 2s, interval: 10s, repeat: 0s}
flap: {window: 60s, min_flip_interval: 2s}
route: {receiver: console}
receivers: [{type: console, name: console}]
"""


#: how long the demo takes at most to stop its worker, publisher and notifier (Ctrl-C included); the embedded
#: broker stops after them. The worker usually stops in ~1.3 s; it is killed after this (the demo's broker,
#: and all the worker's state with it, is gone a moment later anyway).
STOP_GRACE_S = 2.0


@dataclass
class DemoOptions:
    nodes: int = 4
    fleet_minutes: float = 60.0
    speed: float = 60.0
    faults: list[str] = field(default_factory=lambda: [DEMO_FAULT])
    seed: int = 7
    drain_timeout_s: float = 45.0
    #: where the notifier serves the incident console (loopback; port 0: any free port; "": no console)
    console_listen: str = "127.0.0.1:0"
    #: keep the console (and the notifier) up this long after the fleet ran, seconds (Ctrl-C ends it sooner)
    hold_s: float = 0.0
    #: a request trace whose arrivals and token mix drive the fleet (docs/simulator.md); None: the daily curve
    load_trace: str | None = None


@dataclass
class DemoResult:
    snapshots: int = 0
    ticks: int = 0
    wall_s: float = 0.0
    events: list[IncidentEvent] = field(default_factory=list)
    notifications: int = 0
    worker_log: str = ""
    #: the incident console's address, once it serves
    console_url: str | None = None

    @property
    def opened(self) -> list[IncidentEvent]:
        return [e for e in self.events if e.event == "opened"]

    @property
    def resolved(self) -> list[IncidentEvent]:
        return [e for e in self.events if e.event == "resolved"]


async def _watch_incidents(settings: Settings, events: list[IncidentEvent], stop: asyncio.Event) -> None:
    """Collect the incident events for the summary (the notifier prints what it sends)."""
    consumer = make_consumer(settings, settings.incidents_topic, group_id=None)
    await consumer.start()
    seen: set[tuple[str, int]] = set()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    ev = IncidentEvent.model_validate_json(r.value)
                    if (ev.incident_id, ev.sequence) not in seen:
                        seen.add((ev.incident_id, ev.sequence))
                        events.append(ev)
    finally:
        await consumer.stop()


async def run_demo(settings: Settings, opts: DemoOptions, console: Console) -> DemoResult:
    started = time.monotonic()
    result = DemoResult()
    run_id = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="tailhound-demo-"))
    settings = settings.model_copy(
        update={
            "streams": settings.streams.model_copy(
                update={"app_id": f"tailhound-demo-{run_id}", "data_dir": workdir / "streams", "log_level": "info"}
            ),
            # the worker publishes to the incident topic; this process runs the notifier on it
            "sinks": SinksSettings(console={"enabled": False}, incident_topic={"enabled": True}),
            # the notifier here serves the incident console on loopback; silences through the page need no token
            # there (writes stay refused on any other address)
            "notifier": settings.notifier.model_copy(
                update={
                    "enabled": False,
                    "tick_s": 0.2,
                    "api_listen": opts.console_listen,
                    "allow_unauthenticated_writes": True,
                }
            ),
        }
    )
    faults = [FaultSpec.parse(f) for f in opts.faults]
    sim = FleetSimulator(SimConfig(nodes=opts.nodes, seed=opts.seed, load_trace=opts.load_trace), faults)
    origin = sim.config.start_ts
    receiver = ConsoleReceiver(ConsoleConfig(type="console", name="console"), console, origin=origin)

    with broker_for(settings, log_path=str(workdir / "broker.log")) as s:
        console.print(
            f"[bold]tailhound demo[/]: broker {s.broker}, {opts.nodes} nodes x "
            f"{sim.config.gpus_per_node} GPUs, {opts.fleet_minutes:.0f} min of fleet time at "
            f"{opts.speed:g}x, faults: {', '.join(opts.faults) or 'none'}"
        )
        await ensure_topics(s)
        worker = WorkerProcess(s, workdir / "worker.log")
        result.worker_log = str(worker.log_path)
        worker.start()
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch_incidents(s, result.events, stop))
        notifier = NotifierService(s, parse_config(DEMO_NOTIFIER, "demo notifier config"), {"console": receiver})
        notifying = asyncio.create_task(notifier.run(stop))
        pub = SnapshotPublisher(s)
        try:
            await pub.start()
            result.console_url = await _console_url(notifier, opts, console)
            await _run_fleet(sim, pub, opts, console, worker, result)
            await _drain(s, worker, opts, console)
            await _settle(result, receiver, s.streams.rollup_max_delay_s, expect=bool(opts.faults))
            if opts.hold_s > 0 and result.console_url:
                console.print(
                    f"[bold]incident console[/] {result.console_url} stays up for {opts.hold_s:.0f} s "
                    "(Ctrl-C stops the demo)",
                    soft_wrap=True,
                )
                await asyncio.sleep(opts.hold_s)
        finally:  # also on Ctrl-C (the task is cancelled): bounded, see _shut_down
            await _shut_down(worker, pub, stop, [watcher, notifying])
    result.notifications = len(receiver.sent)
    result.wall_s = time.monotonic() - started
    _summary(console, result, opts)
    if result.opened or not opts.faults:
        shutil.rmtree(workdir, ignore_errors=True)  # keep the logs only when something went wrong
    return result


async def _shut_down(
    worker: WorkerProcess,
    pub: SnapshotPublisher,
    stop: asyncio.Event,
    tasks: list[asyncio.Task],
    grace_s: float = STOP_GRACE_S,
) -> None:
    """Stop the worker, the publisher and the in-process tasks together, within `grace_s`.

    The worker is asked first (SIGTERM) and stops while the rest closes; it is killed when `grace_s` is over.
    Then the broker stops (broker_for)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    worker.terminate()
    stop.set()
    closing = [asyncio.ensure_future(pub.stop(timeout_s=grace_s / 2)), *tasks]
    _, pending = await asyncio.wait(closing, timeout=max(deadline - loop.time() - 0.3, 0.1))
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=0.2)
    while worker.alive() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    worker.stop(timeout=0)  # SIGKILL if it is still there
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        # Ctrl-C: the process exits next. Its final garbage collections walked every object the demo made
        # (0.3 s, ~1 s on a busy machine, of the 5 s a Ctrl-C may take); frozen objects are left out of them.
        gc.freeze()


async def _console_url(notifier: NotifierService, opts: DemoOptions, console: Console) -> str | None:
    """The console's URL once the notifier's API is bound (it starts with the notifier), printed."""
    if not opts.console_listen:
        return None
    deadline = time.monotonic() + 10.0
    while notifier.api_port is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if notifier.api_port is None:
        console.print("[yellow]the incident console did not start; the demo goes on without it[/]")
        return None
    host = opts.console_listen.rpartition(":")[0].strip("[]") or "127.0.0.1"
    url = f"http://{host}:{notifier.api_port}/console"
    console.print(f"[bold]incident console[/]: {url}", soft_wrap=True)
    return url


async def _run_fleet(
    sim: FleetSimulator,
    pub: SnapshotPublisher,
    opts: DemoOptions,
    console: Console,
    worker: WorkerProcess,
    result: DemoResult,
) -> None:
    interval_wall = sim.config.interval_s / opts.speed
    duration_s = opts.fleet_minutes * 60
    next_report = 0.0
    t0 = time.monotonic()
    for i, (ts, snaps) in enumerate(sim.run(duration_s)):
        await pub.publish(snaps)
        result.ticks += 1
        result.snapshots += len(snaps)
        fleet_s = ts - sim.config.start_ts
        if fleet_s >= next_report:
            active = ", ".join(f.name for f in sim.active_faults(fleet_s)) or "healthy"
            console.print(
                f"[dim]fleet time +{int(fleet_s // 60):02d}:{int(fleet_s % 60):02d}  "
                f"snapshots sent {result.snapshots:5d}  fleet: {active}[/]"
            )
            next_report += 300
        if not worker.supervise():  # a worker that failed is started again (it recovers from its changelogs)
            raise TailhoundError(f"the streams worker exited; last lines of {worker.log_path}:\n{worker.log_tail()}")
        delay = t0 + (i + 1) * interval_wall - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


async def _settle(result: DemoResult, receiver: ConsoleReceiver, rollup_delay_s: float, *, expect: bool) -> None:
    """Give the last incident events and their notifications time to arrive: once the fleet stops, no
    watermark moves, so the roll-up releases what it holds only after its `rollup_delay_s` bound. With
    faults injected (`expect`), nothing opened yet means the events are still on their way."""
    deadline = time.monotonic() + rollup_delay_s + 8.0
    await asyncio.sleep(1.0)
    while time.monotonic() < deadline:
        open_ids = {e.incident_id for e in result.events if e.event == "opened"}
        closed = {e.incident_id for e in result.events if e.event == "resolved"}
        if expect and not open_ids:
            await asyncio.sleep(0.25)
            continue
        if open_ids <= closed and (not open_ids or any(n.kind == "resolved" for n in receiver.sent)):
            return
        await asyncio.sleep(0.25)


async def _drain(s: Settings, worker: WorkerProcess, opts: DemoOptions, console: Console) -> None:
    """Wait until the worker has committed every telemetry message."""
    deadline = time.monotonic() + opts.drain_timeout_s
    lag: int | None = None
    while time.monotonic() < deadline:
        if not worker.supervise():
            raise TailhoundError(f"the streams worker exited; last lines of {worker.log_path}:\n{worker.log_tail()}")
        lag = await group_lag(s, s.streams.app_id, s.telemetry_topic)
        if lag == 0:
            return
        await asyncio.sleep(0.5)
    console.print(
        f"[yellow]the worker still had {lag} telemetry messages to process after "
        f"{opts.drain_timeout_s:.0f}s; see {worker.log_path}[/]"
    )


def _summary(console: Console, result: DemoResult, opts: DemoOptions) -> None:
    table = Table(title="tailhound demo summary", show_header=False)
    table.add_row("fleet time simulated", f"{opts.fleet_minutes:.0f} min ({result.ticks} scrape rounds)")
    table.add_row("snapshots published", str(result.snapshots))
    table.add_row("incidents opened", str(len(result.opened)))
    table.add_row("incidents resolved", str(len(result.resolved)))
    table.add_row("incident events", str(len(result.events)))
    table.add_row("notifications sent", str(result.notifications))
    for ev in result.opened:
        last = [e for e in result.events if e.incident_id == ev.incident_id][-1]
        table.add_row(f"  {ev.root_cause}", f"{last.scope.describe()} -> {last.event}")
    table.add_row("wall time", f"{result.wall_s:.1f} s")
    console.print(table)
