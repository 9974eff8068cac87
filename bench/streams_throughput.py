"""Streams throughput: the same telemetry messages consumed four ways, side by side in one run.

Input: a simulated fleet (8 nodes x vllm + dcgm + node + blackbox, one thermal-throttle fault) rendered
as a scrape recording and turned into snapshots by the agent's own pipeline (``SnapshotBuilder``, so
counters and histograms carry their deltas), encoded as the agent's sender does
(``model_dump_json(exclude_none=True)``, key = node, lz4) and produced once to the telemetry topic of
the bundled broker (unique topic prefix, the default partition count). The topic holds ``warmup``
snapshots (one fleet tick) followed by the ``n`` measured ones. Each measurement is a child process
with its own consumer group that reads the topic from the start:

- ``aiokafka``: a plain aiokafka consumer that only counts messages (the upper bound);
- ``faust``: a trivial Faust agent (``stream.events()``, raw values, only counts) on an app with the
  settings :func:`tailhound.streams.app.create_app` gives (copied from the real app's ``conf``, checked equal);
- ``faust-json``: the same trivial agent with Faust's default value codec (``json``): ``async for value
  in stream`` gets each message decoded, as a Faust agent written without thought for speed does
  (the ~4-5k events/s the project's guide quotes for "a trivial Faust agent");
- ``tailhound``: the real worker: ``create_app(settings, load_rules("rules"))`` run by
  ``tailhound.streams.app.make_worker`` as ``tailhound worker`` runs it (the trivial app runs under the same). It is
  observed, not changed: ``tailhound.streams.app.SnapshotProcessor`` is replaced by a subclass whose ``step`` calls
  the original and then counts (one integer add);
- ``wiring``: the real worker with ``SnapshotProcessor.step`` replaced by one that only counts (no rule
  runs, nothing is stored): decode, table read, model-topic forwarding and the model stage still run.
  What the worker around the rules costs: no rule engine inside this wiring can be faster;
- ``step``: no Kafka: ``SnapshotProcessor.step`` over the decoded snapshots in a loop, in this process.

Every Kafka variant counts the same way: the clock starts when message number ``warmup`` is handled
(so group join, partition assignment, table recovery and first-message costs are outside the window)
and stops at message ``warmup + n``; throughput is ``n`` over that time, CPU is the child's
utime+stime over it. (a) only counts, so its window is a few fetch rounds (up to 1 MB per partition
each) after the first fetch: a loose upper bound, not a steady-state rate. After each run the group's
committed lag must reach 0 (``group_lag``), which checks that every message was consumed and
committed; then the child is stopped (SIGTERM, bounded waits, SIGKILL as a last resort). Variants are
interleaved ``reps`` times; medians are reported.

Telemetry shapes (``--bundle``, ``--nvml``): the node's snapshots of a tick as one bundle message (telemetry
version 2, as an agent with ``publish.bundle`` sends them), and every node running the NVML collector at 1 s;
counts and rates stay in snapshots. ``BENCH_STREAMS_APP=FILE`` runs FILE as ``tailhound.streams.app`` in the
Kafka children (a proposed change of that module, measured before it is applied).

Where a child's time goes: ``BENCH_STREAMS_PROFILE=DIR python -m bench.streams_throughput 4096 --reps 1
--variants faust,tailhound`` writes one report per run over the same window (:class:`Profile`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.broker import EmbeddedBroker, _die_with_parent
from tailhound.kafka import ensure_topics, group_lag, make_producer
from tailhound.settings import Settings
from tailhound.streams.codec import decode_message
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
NODES = 8
FAULTS = ("thermal-throttle@10m+10m",)  # the first node, GPUs 3 and 5
VARIANTS = ("aiokafka", "faust", "faust-json", "tailhound", "wiring", "step")
LABELS = {
    "aiokafka": "(a) plain aiokafka consumer, counts only (upper bound)",
    "faust": "(b) trivial Faust agent, same app settings, counts only",
    "faust-json": "(b') trivial Faust agent, Faust's default JSON values, counts only",
    "tailhound": "(c) tailhound worker: create_app + default rules",
    "wiring": "(c0) the same worker, step replaced by a counter (no rules run)",
    "step": "(d) SnapshotProcessor.step only, no Kafka (decoded snapshots)",
    "decode": "(d') codec decode only, no Kafka (reference)",
}
#: The faust.App settings create_app sets; the trivial app copies their values from the real app.
FAUST_KEYS = (
    "broker",
    "store",
    "datadir",
    "autodiscover",
    "web_enabled",
    "topic_partitions",
    "topic_replication_factor",
    "topic_allow_declare",
    "table_standby_replicas",
    "broker_commit_interval",
    "broker_session_timeout",
    "broker_heartbeat_interval",
    "broker_rebalance_timeout",
    "consumer_auto_offset_reset",
    "consumer_group_instance_id",
    "recovery_consistency_check",
)


# --- input -----------------------------------------------------------------------------------------
def fleet_messages(count: int, nodes: int = NODES, nvml: bool = False) -> list[tuple[bytes, bytes]]:
    """`count` (key, value) telemetry messages of a simulated fleet, tick by tick, as the agent sends them,
    one snapshot each. With `nvml`, every node also runs the NVML collector at 1 s (an 8-GPU H200's records,
    :data:`NVML_RECORDING`, replayed in a loop as each node's): 15 NVML snapshots per 15 s tick."""
    sim = FleetSimulator(SimConfig(nodes=nodes), [FaultSpec.parse(f) for f in FAULTS])
    builder = SnapshotBuilder()
    records = iter_records(sim, minutes=10**6)
    if nvml:
        records = with_nvml(records)
    records = itertools.islice(records, count)
    return [(s.key(), s.model_dump_json(exclude_none=True).encode()) for s in map(builder.build, records)]


#: a real 8-GPU H200's NVML collections at 1 s (the agent's own collector, recorded)
NVML_RECORDING = ROOT / "tests" / "agents" / "fixtures" / "h200_nvml_recording.jsonl"


def with_nvml(records):  # an iterator of ScrapeRecord in, the same out
    """`records` (a fleet's, tick by tick) with each node's NVML collections at 1 s added: at each tick's
    second 0 after the node's other sources (what one tick of the agent publishes), then one a second."""
    from tailhound.recording import ScrapeRecord

    bodies = [ScrapeRecord.model_validate_json(line).body for line in NVML_RECORDING.read_text().splitlines()]
    turn = itertools.count()
    tick: list = []
    for rec in itertools.chain(records, [None]):
        if tick and (rec is None or rec.ts != tick[0].ts):
            t0, nodes = tick[0].ts, list(dict.fromkeys(r.node for r in tick))
            for second in range(15):
                for node in nodes:
                    if second == 0:
                        yield from (r for r in tick if r.node == node)
                    yield ScrapeRecord(
                        ts=t0 + second, node=node, job="nvml", interval_s=1.0, body=bodies[next(turn) % len(bodies)]
                    )
            tick = []
        if rec is not None:
            tick.append(rec)


def bundled(messages: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`messages` as an agent with ``publish.bundle`` sends them: each run of one node's snapshots as one
    bundle message (telemetry version 2, :func:`tailhound.agents.sender.bundle_batch`)."""
    from tailhound.agents.buffer import Message
    from tailhound.agents.sender import bundle_batch

    return [(m.key, m.value) for m in bundle_batch([Message(key=k, value=v) for k, v in messages])]


def snapshots_in(value: bytes) -> int:
    """Snapshots in one telemetry message (a bundle's parts; bench messages only: a byte count, no decode)."""
    return value.count(b'{"schema_version":1,') if value.startswith(b'{"schema_version":2,') else 1


async def produce(settings: Settings, messages: list[tuple[bytes, bytes]]) -> None:
    producer = make_producer(settings, compression_type="lz4")
    await producer.start()
    try:
        futures = [await producer.send(settings.telemetry_topic, key=k, value=v) for k, v in messages]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


# --- child side ------------------------------------------------------------------------------------
#: a pause between two consecutive messages longer than this counts as a stall (waiting for a fetch)
STALL_S = 0.1


def timing(n: int, wall: float, cpu: float, lag: int | None = None, stalled_s: float = 0.0) -> dict:
    """`rate` is messages per second of the window; `cpu_rate` per second of the child's CPU time (what
    one busy core would do: steady where `rate` depends on whether the consumer waited for fetches);
    `stalled_s`: the window's pauses of over STALL_S between two messages."""
    return {
        "n": n,
        "wall_s": wall,
        "rate": n / wall,
        "cpu_pct": 100 * cpu / wall,
        "cpu_rate": n / cpu if cpu else 0.0,
        "stalled_s": stalled_s,
        "lag": lag,
    }


#: opt-in profiling of the Kafka children over the measured window: a folder for one report per run
PROFILE_ENV = "BENCH_STREAMS_PROFILE"
#: ``sections`` (default: timers around the worker's known parts, and GC), or yappi with the ``cpu`` or
#: ``wall`` clock (every function, thread and coroutine; yappi costs ~4x and inflates Python code most)
PROFILE_MODE_ENV = "BENCH_STREAMS_PROFILE_MODE"
#: (module, class or None, function, section): sync calls of the worker, timed exclusive of each other
SECTIONS = (
    ("tailhound.streams.codec", None, "decode_snapshot", "decode (tailhound.streams.codec, pydantic)"),
    ("tailhound.streams.codec", None, "_decode_bundle", "decode (tailhound.streams.codec, pydantic)"),
    ("tailhound.streams.intake", "Gate", "admit", "intake checks (key, time bounds)"),
    ("tailhound.streams.intake", "Gate", "admit_all", "intake checks (key, time bounds)"),
    ("tailhound.streams.processor", "SnapshotProcessor", "step", "rules: SnapshotProcessor.step"),
    ("tailhound.streams.model_stage", "ModelStage", "add", "model stage: aggregation (its steps: rules)"),
    ("faust.tables.table", "Table", "__setitem__", "table write (state JSON, changelog send)"),
)


class Profile:
    """Where the child's time goes between message `warmup` and `warmup + n`, written to `folder`."""

    def __init__(self, folder: Path, name: str, mode: str = "sections") -> None:
        self.path, self.mode = folder / f"{name}.{mode}.txt", mode
        self.spent: dict[str, list] = {}  # section -> [seconds, calls]
        self.stack: list[list] = []  # open sections: [name, start, time spent in sections inside it]

    def _enter(self, name: str) -> None:
        self.stack.append([name, time.perf_counter(), 0.0])

    def _exit(self) -> None:
        name, t0, inner = self.stack.pop()
        took = time.perf_counter() - t0
        spent = self.spent.setdefault(name, [0.0, 0])
        spent[0], spent[1] = spent[0] + took - inner, spent[1] + 1
        if self.stack:
            self.stack[-1][2] += took

    def _timed(self, fun, name: str):
        def timed(*args, **kwargs):
            self._enter(name)
            try:
                return fun(*args, **kwargs)
            finally:
                self._exit()

        return timed

    def _gc(self, phase: str, _info: dict) -> None:
        self._enter("garbage collection") if phase == "start" else self._exit()

    def start(self) -> None:
        if self.mode == "sections":
            for module, cls, fun, name in SECTIONS:
                owner = importlib.import_module(module)
                owner = getattr(owner, cls) if cls else owner
                setattr(owner, fun, self._timed(getattr(owner, fun), name))
            gc.callbacks.append(self._gc)
        else:
            import yappi

            yappi.set_clock_type(self.mode)
            yappi.start(builtins=False, profile_threads=True)
        self.t0 = time.perf_counter()

    def stop(self, n: int) -> None:
        wall = time.perf_counter() - self.t0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.mode == "sections":
            gc.callbacks.remove(self._gc)
            rest = wall - sum(t for t, _ in self.spent.values())
            rows = sorted(self.spent.items(), key=lambda kv: -kv[1][0])
            rows.append(("rest: Faust, Kafka client, event loop, agent code", [rest, 0]))
            self.path.write_text(
                f"# {n} snapshots, {1e3 * wall / n:.3f} ms each (wall)\n"
                + "".join(
                    f"{1e3 * t / n:7.3f} ms {100 * t / wall:5.1f}% {c / n:6.2f}/snapshot  {name}\n"
                    for name, (t, c) in rows
                )
            )
            return
        import yappi

        yappi.stop()
        stats = yappi.get_func_stats()
        stats.save(str(self.path.with_suffix(".pstat")), type="pstat")
        lines = [f"# thread {t.name}: {1e6 * t.ttot / n:.1f} us/snapshot" for t in yappi.get_thread_stats()]
        lines.append(f"# yappi {self.mode} clock, {n} snapshots; us per snapshot: tsub (own), ttot (with callees)")
        lines += [
            f"{1e6 * s.tsub / n:9.1f} {1e6 * s.ttot / n:9.1f} {s.ncall / n:8.2f}/snapshot  {s.module}:{s.lineno} "
            f"{s.name}"
            for s in sorted(stats, key=lambda s: s.tsub, reverse=True)[:400]
        ]
        self.path.write_text("\n".join(lines) + "\n")


class Counter:
    """Counts handled messages; times message `warmup` to message `warmup + n`, then writes the result."""

    def __init__(self, warmup: int, n: int, result: Path, profile: Profile | None = None) -> None:
        self.warmup, self.n, self.result = warmup, n, result
        self.seen = 0
        self.t0 = self.c0 = self.last = self.stalled = 0.0
        self.profile = profile

    @property
    def done(self) -> bool:
        return self.seen >= self.warmup + self.n

    def tick(self, k: int = 1) -> None:
        """`k` more snapshots handled (a bundle message counts its parts)."""
        before = self.seen
        self.seen += k
        if before < self.warmup:
            if self.seen >= self.warmup:
                if self.profile is not None:
                    self.profile.start()
                self.t0, self.c0 = time.perf_counter(), time.process_time()
                self.last = self.t0
            return
        if before >= self.warmup + self.n:
            return
        now = time.perf_counter()
        if now - self.last > STALL_S:
            self.stalled += now - self.last
        self.last = now
        if self.seen >= self.warmup + self.n:
            wall, cpu = now - self.t0, time.process_time() - self.c0
            if self.profile is not None:
                self.profile.stop(self.n)
            tmp = self.result.with_suffix(".tmp")
            tmp.write_text(json.dumps(timing(self.n, wall, cpu, stalled_s=self.stalled)))
            tmp.rename(self.result)


def trivial_app(settings: Settings, counter: Counter | None = None, value_serializer: str = "raw"):
    """A Faust app with create_app's settings and one agent that only counts; also returns the real app.
    With ``value_serializer="json"`` the agent iterates decoded values (Faust's default codec)."""
    import faust

    from tailhound.streams.app import create_app

    real = create_app(settings, load_rules(settings.rules_dir))
    app = faust.App(settings.streams.app_id, **{k: getattr(real.conf, k) for k in FAUST_KEYS})
    topic = app.topic(
        settings.telemetry_topic,
        key_serializer="raw",
        value_serializer=value_serializer,
        partitions=settings.partitions,
    )

    if value_serializer == "raw":

        @app.agent(topic, name="count")
        async def count(stream) -> None:
            async for event in stream.events():
                if counter is not None:
                    counter.tick(snapshots_in(event.message.value))
    else:

        @app.agent(topic, name="count")
        async def count_values(stream) -> None:
            async for value in stream:
                if counter is not None:
                    counter.tick(len(value["snapshots"]) if value.get("schema_version") == 2 else 1)

    return app, real


def conf_diff(a, b) -> list[str]:
    """Faust settings that differ between two apps (reply_to is a random name per app)."""
    names = [n for n in a.conf.setting_names() if n != "reply_to"]
    return [n for n in names if getattr(a.conf, n) != getattr(b.conf, n)]


def counting_worker_app(settings: Settings, counter: Counter, rules: bool = True):
    """The real app, observed: SnapshotProcessor.step counts after it returns; nothing else changes.
    Without `rules` the step only counts (the ``wiring`` variant)."""
    import tailhound.streams.app
    from tailhound.streams.processor import StepResult

    class CountingProcessor(tailhound.streams.app.SnapshotProcessor):
        def step(self, raw_state, snapshot, **kw):
            result = super().step(raw_state, snapshot, **kw) if rules else StepResult(state=None, changed=False)
            counter.tick()
            return result

    from tailhound.worker.compose import create_worker_app

    tailhound.streams.app.SnapshotProcessor = CountingProcessor
    return create_worker_app(settings, load_rules(settings.rules_dir))  # as `tailhound worker` builds it


async def count_aiokafka(settings: Settings, counter: Counter, group: str) -> None:
    from tailhound.kafka import make_consumer

    consumer = make_consumer(settings, settings.telemetry_topic, group_id=group)
    await consumer.start()
    try:
        while not counter.done:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    counter.tick(snapshots_in(record.value))
        await consumer.commit()
    finally:
        await consumer.stop()


#: a file to run as ``tailhound.streams.app`` in the Kafka children instead of the tree's (a proposed change of
#: that module measured before it is applied, e.g. the bundle loop of BENCHMARKS.md "Scale out")
APP_ENV = "BENCH_STREAMS_APP"


def _override_app(path: str) -> None:
    import importlib.util

    import tailhound.streams

    spec = importlib.util.spec_from_file_location("tailhound.streams.app", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["tailhound.streams.app"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    tailhound.streams.app = module  # type: ignore[attr-defined]


def child_main(variant: str, result: str, warmup: str, n: str, settings_json: str) -> None:
    settings = Settings(**json.loads(settings_json))
    if os.environ.get(APP_ENV):
        _override_app(os.environ[APP_ENV])
    folder = os.environ.get(PROFILE_ENV)
    profile = (
        Profile(Path(folder), f"{variant}-{Path(result).stem}", os.environ.get(PROFILE_MODE_ENV, "sections"))
        if folder
        else None
    )
    counter = Counter(int(warmup), int(n), Path(result), profile)
    if variant == "aiokafka":
        asyncio.run(count_aiokafka(settings, counter, settings.streams.app_id))
        return
    from tailhound.streams.app import make_worker

    if variant in ("faust", "faust-json"):
        app, real = trivial_app(settings, counter, "json" if variant == "faust-json" else "raw")
        if diff := conf_diff(app, real):
            raise SystemExit(f"trivial app settings differ from create_app's: {diff}")
    else:
        app = counting_worker_app(settings, counter, rules=variant != "wiring")
    make_worker(app, settings).execute_from_commandline()  # both as `tailhound worker` runs its app


# --- parent side -----------------------------------------------------------------------------------
async def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """Wait `grace_s` for the child to exit by itself, then SIGTERM (15 s), then SIGKILL."""
    for sig, wait_s in ((None, grace_s), (signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        if sig is not None:
            proc.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)


async def _lag_zero(settings: Settings, group: str, timeout_s: float = 10.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    while True:
        lag = await group_lag(settings, group, settings.telemetry_topic)
        if lag == 0 or time.monotonic() > deadline:
            return lag
        await asyncio.sleep(0.5)


async def measure(
    variant: str, settings: Settings, warmup: int, n: int, workdir: Path, timeout_s: float = 300.0
) -> dict:
    """One Kafka variant in a child process with its own consumer group; see the module docstring."""
    group = f"bench-{variant}-{uuid.uuid4().hex[:8]}"
    s = settings.model_copy(
        update={"streams": settings.streams.model_copy(update={"app_id": group, "data_dir": workdir / group})}
    )
    result, log = workdir / f"{group}.json", workdir / f"{group}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env["PYTHONPATH"] = str(ROOT)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.streams_throughput",
                "child",
                variant,
                str(result),
                str(warmup),
                str(n),
                s.model_dump_json(),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not result.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited {proc.returncode}" if proc.poll() is not None else f"no result in {timeout_s:.0f} s"
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise RuntimeError(f"{variant} child {why}:\n{tail}")
            await asyncio.sleep(0.1)
        out = json.loads(result.read_text())
        out["lag"] = await _lag_zero(s, group)
    finally:
        await _stop(proc, grace_s=10.0 if variant == "aiokafka" else 0.0)
    return out


def measure_step(values: list[bytes], warmup: int, rules) -> tuple[dict, dict]:
    """(d) SnapshotProcessor.step over decoded snapshots, and (d') the decode alone, timed after `warmup`
    snapshots (messages of either version: a bundle decodes into its parts)."""
    first = list(itertools.accumulate(map(snapshots_in, values))).index(warmup) + 1 if warmup else 0
    head = [s for v in values[:first] for s in decode_message(v)]  # type: ignore[union-attr]
    t0, c0 = time.perf_counter(), time.process_time()
    decoded = [decode_message(v) for v in values[first:]]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    snapshots = [s for parts in decoded for s in parts]  # type: ignore[union-attr]
    n = len(snapshots)
    decode = timing(n, wall, cpu)
    snapshots = head + snapshots
    processor, store = SnapshotProcessor(rules), MemoryStateStore()
    for i, snap in enumerate(snapshots):
        if i == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        step = processor.step(store.get(snap.node), snap)
        if step.changed:
            store[snap.node] = step.state
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return timing(n, wall, cpu), decode


async def run(
    n: int = 4096,
    reps: int = 3,
    variants: tuple[str, ...] = VARIANTS,
    nodes: int = NODES,
    warmup: int | None = None,
    bundle: bool = False,
    nvml: bool = False,
) -> dict:
    """`bundle`: the messages as an agent with ``publish.bundle`` sends them (a node's tick in one message);
    `nvml`: every node also runs the NVML collector at 1 s. Counts, warm-up and rates are in snapshots."""
    warmup = warmup or nodes * 4  # one fleet tick
    messages = fleet_messages(warmup + n, nodes, nvml=nvml)
    if bundle:
        messages = bundled(messages)
    runs: dict[str, list[dict]] = {v: [] for v in (*variants, *(["decode"] if "step" in variants else []))}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        settings = Settings(
            broker=broker.url,
            topic_prefix=f"bench{uuid.uuid4().hex[:6]}.",
            rules_dir=RULES,
            streams={"data_dir": Path(tmp)},
        )
        await ensure_topics(settings)
        await produce(settings, messages)
        rules = load_rules(RULES)
        for rep in range(reps):
            for variant in variants:
                if variant == "step":
                    step, decode = measure_step([v for _, v in messages], warmup, rules)
                    runs["step"].append(step)
                    runs["decode"].append(decode)
                else:
                    runs[variant].append(await measure(variant, settings, warmup, n, Path(tmp)))
                print(
                    f"  rep {rep + 1}/{reps} {variant}: {runs[variant][-1]['rate']:,.0f} snapshots/s", file=sys.stderr
                )
        partitions = settings.partitions
    sizes = [len(v) for _, v in messages]
    return {
        "n": n,
        "warmup": warmup,
        "nodes": nodes,
        "reps": reps,
        "partitions": partitions,
        "mean_bytes": statistics.mean(sizes),
        "runs": runs,
        "bundle": bundle,
        "nvml": nvml,
        "messages": len(sizes),
    }


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(result: dict) -> str:
    runs = result["runs"]
    ref = _median(runs["faust"], "rate") if runs.get("faust") else None
    ref_cpu = _median(runs["faust"], "cpu_rate") if runs.get("faust") else None
    shape = (
        f"{'bundled: one message per node and tick, ' if result.get('bundle') else ''}"
        f"{result.get('messages', result['n'] + result['warmup']):,} messages"
    )
    lines = [
        f"{result['n']:,} snapshots measured after {result['warmup']} warm-up ({result['nodes']} nodes x vllm + "
        f"dcgm + node + blackbox{' + nvml at 1 s' if result.get('nvml') else ''}, {shape}, "
        f"{result['mean_bytes'] / 1024:.1f} KB JSON a message on average, lz4, "
        f"{result['partitions']} partitions); medians of {result['reps']}.",
        "",
        "| consumer | snapshots/s | runs (snapshots/s) | window (s) | stalled (s) | CPU (% of one core) "
        "| per CPU-second | vs (b) | vs (b) per CPU-second | lag after |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, rs in runs.items():
        if not rs:
            continue
        rate = _median(rs, "rate")
        each = ", ".join(f"{r['rate']:,.0f}" for r in rs)
        vs = "-" if not ref else f"{rate / ref:.0f}x" if rate >= 10 * ref else f"{rate / ref:.2f}x"
        lags = [r["lag"] for r in rs]
        lag = "-" if variant in ("step", "decode") else ("?" if None in lags else str(max(lags)))
        cpu_rate = _median(rs, "cpu_rate")
        vs_cpu = (
            "-"
            if not ref_cpu
            else f"{cpu_rate / ref_cpu:.0f}x"
            if cpu_rate >= 10 * ref_cpu
            else f"{cpu_rate / ref_cpu:.2f}x"
        )
        lines.append(
            f"| {LABELS[variant]} | {rate:,.0f} | {each} | {_median(rs, 'wall_s'):.2f} "
            f"| {_median(rs, 'stalled_s'):.2f} | {_median(rs, 'cpu_pct'):.0f} | {cpu_rate:,.0f} | {vs} "
            f"| {vs_cpu} | {lag} |"
        )
    if ref and runs.get("tailhound"):
        ratio = _median(runs["tailhound"], "rate") / ref
        lines += ["", f"(c)/(b) = **{ratio:.0%}** (target >= 50%: {'met' if ratio >= 0.5 else 'not met'})"]
        cpu_ratio = _median(runs["tailhound"], "cpu_rate") / ref_cpu
        lines.append(f"per CPU-second (both busy): (c)/(b) = **{cpu_ratio:.0%}**")
        if runs.get("faust-json"):
            ratio = _median(runs["tailhound"], "rate") / _median(runs["faust-json"], "rate")
            cpu_ratio = _median(runs["tailhound"], "cpu_rate") / _median(runs["faust-json"], "cpu_rate")
            lines.append(f"(c)/(b') = **{ratio:.0%}**; per CPU-second **{cpu_ratio:.0%}**")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child_main(*sys.argv[2:7])
    else:
        import argparse

        ap = argparse.ArgumentParser(
            prog="python -m bench.streams_throughput",
            description=f"profile the Kafka children with {PROFILE_ENV}=DIR ({PROFILE_MODE_ENV}=sections|cpu|wall)",
        )
        ap.add_argument("n", type=int, nargs="?", default=4096)
        ap.add_argument("--reps", type=int, default=3)
        ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
        ap.add_argument("--bundle", action="store_true", help="one message per node and tick (telemetry version 2)")
        ap.add_argument("--nvml", action="store_true", help="every node also runs the NVML collector at 1 s")
        a = ap.parse_args()
        with contextlib.suppress(KeyboardInterrupt):
            print(
                report(
                    asyncio.run(
                        run(n=a.n, reps=a.reps, variants=tuple(a.variants.split(",")), bundle=a.bundle, nvml=a.nvml)
                    )
                )
            )
