"""The Kafka side of the streams throughput benchmark: one child process per measured consumer.

``python -m bench.streams_child VARIANT RESULT WARMUP N SETTINGS_JSON`` consumes the telemetry topic with one
variant (a plain aiokafka consumer, a trivial Faust agent, the real worker observed or with its step replaced)
and writes the timing of messages ``WARMUP`` to ``WARMUP + N`` to RESULT; a child of its own so that each
variant pays its own start-up and imports and its CPU time is its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from tailhound.settings import Settings
from tailhound.streams.ruleset.rulefile import load_rules

from .child_profile import PROFILE_ENV, PROFILE_MODE_ENV, Profile
from .fleet_telemetry import snapshots_in

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
    from tailhound.streams.step_result import StepResult

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


if __name__ == "__main__":
    child_main(*sys.argv[1:6])
