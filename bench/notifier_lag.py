"""Notifier detection-to-delivery lag: incident event on the incidents topic -> request at a receiver.

Method: the harness (this process) runs the bundled broker, a loopback receiver and a producer; the
notifier runs as its own process (``python -m bench.notifier_lag child``): the real
:class:`tailhound.notifier.service.NotifierService` with the receivers
:func:`tailhound.notifier.receiver_set.build_receivers`
builds from a notifier config, at the default settings (``notifier.tick_s`` 0.2, log level warning) and
the default config except ``grouping.wait: 0s`` and ``flap.min_flip_interval: 0s``, the two deliberate
holds (a new group waits ``wait``, 30 s by default, to gather a burst; a resolve waits
``min_flip_interval``, 60 s by default, so a quick re-fire does not page twice), which this benchmark
leaves out. Once the child has taken over the incidents partition, the harness produces `n` incidents
(distinct ids, one group each) ``spacing_s`` apart and each one's resolve ``resolve_after_s`` after its
opening, with the producer settings the streams worker's Faust producer has (linger 0, acks all).

Lag = arrival at the receiver (``time.time()`` when the request handler starts) minus the Kafka record
timestamp of the incident event (CreateTime, set by the producer client at ``send``; read back from the
topic afterwards). Receivers: the signed remediation webhook (``tests/notifier/webhook_server.py``,
signatures verified) and Slack in bot mode against the fake Slack Web API
(``tests/notifier/slack_server.py``; ``chat.postMessage`` for the page, ``chat.update`` for the resolve;
``min_interval_s: 0``, because Slack's default pacing of one message per second per channel would make
the lag of a 20-per-second stream the queue length, by design). Each pass uses fresh topics and a fresh
consumer group; runs are repeated `reps` times and the per-run percentiles and their medians reported.

For the breakdown the child observes without changing anything: the notification's ``ts`` is the
service's clock right after the poll that brought the event (so record -> ``ts`` is fetch + decode),
a receiver wrapper notes when the deliverer hands it the notification (so ``ts`` -> hand-over is
ingest, flush, state persist, offset commit and the deliverer's scheduling), and hand-over -> arrival
is the receiver's HTTP request; ``NotifierService._persist`` and the incidents consumer's ``commit``
are wrapped to time the state writes and offset commits. The ``webhook-fetch-wait-100`` variant is a
what-if, not the shipped service: the same, with the incidents consumer's ``fetch_max_wait_ms`` set to
100 (aiokafka's default is 500; the bundled broker answers an empty fetch only after about half of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tailhound.broker import EmbeddedBroker, _die_with_parent
from tailhound.kafka import ensure_topics, make_consumer, make_producer
from tailhound.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TARGET_P99_S = 0.5
#: variant -> (receiver, fetch_max_wait_ms of the notifier's incidents consumer; None: as shipped)
VARIANTS: dict[str, tuple[str, int | None]] = {
    "webhook": ("webhook", None),
    "slack": ("slack", None),
    "webhook-fetch-wait-100": ("webhook", 100),
}
LABELS = {
    "webhook": "signed webhook (remediation endpoint)",
    "slack": "Slack bot (fake Web API)",
    "webhook-fetch-wait-100": "what-if: webhook, incidents consumer `fetch_max_wait_ms=100`",
}
SECRET_ENV, TOKEN_ENV = "BENCH_WEBHOOK_SECRET", "BENCH_SLACK_TOKEN"
WEBHOOK_SECRET = "bench-webhook-signing-secret-0123456789"
KINDS = ("opened", "resolved")


def config_yaml(receiver: str, url: str) -> str:
    """The notifier config: defaults, except the two holds this benchmark leaves out."""
    head = "grouping: {by: [incident], wait: 0s}\nflap: {min_flip_interval: 0s}\n"
    if receiver == "webhook":
        rc = f"{{type: webhook, name: webhook, url: '{url}', secret: {{env: {SECRET_ENV}}}}}"
    else:
        rc = (
            f"{{type: slack, name: slack, token: {{env: {TOKEN_ENV}}}, channel: '#alerts', base_url: '{url}', "
            "min_interval_s: 0}"
        )
    return head + f"route: {{receiver: {receiver}}}\nreceivers: [{rc}]\n"


# --- child: the notifier service, observed -------------------------------------------------------------------------
class TimedReceiver:
    """Delegates to the real receiver; notes when each notification is handed over and when send returns."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.sends: list[list[Any]] = []

    async def send(self, notification: Any, receipt: Any) -> Any:
        t0 = time.time()
        try:
            return await self.inner.send(notification, receipt)
        finally:
            self.sends.append([notification.group_id, notification.kind, t0, time.time()])

    async def close(self) -> None:
        await self.inner.close()


async def child_main(
    settings_json: str, config_path: str, ready_path: str, result_path: str, fetch_max_wait_ms: str = ""
) -> None:
    import tailhound.notifier.service
    from tailhound.notifier.config import load_config
    from tailhound.notifier.receiver_set import build_receivers
    from tailhound.notifier.service import NotifierService

    commits: list[float] = []
    shipped_make_consumer = tailhound.notifier.service.make_consumer

    def observed_consumer(settings: Settings, *topics: str, **kwargs: Any) -> Any:
        """The service's consumers as shipped; the group consumer's commit is timed (and, for the
        what-if variant only, its fetch_max_wait_ms set)."""
        if kwargs.get("group_id") is not None and fetch_max_wait_ms:
            kwargs["fetch_max_wait_ms"] = int(fetch_max_wait_ms)
        consumer = shipped_make_consumer(settings, *topics, **kwargs)
        if kwargs.get("group_id") is not None:
            commit = consumer.commit

            async def timed_commit(*args: Any, **kw: Any) -> None:
                t0 = time.perf_counter()
                await commit(*args, **kw)
                commits.append(time.perf_counter() - t0)

            consumer.commit = timed_commit
        return consumer

    tailhound.notifier.service.make_consumer = observed_consumer  # type: ignore[assignment]

    settings = Settings(**json.loads(settings_json))
    logging.basicConfig(
        level=settings.streams.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = load_config(config_path)
    receivers = {name: TimedReceiver(r) for name, r in build_receivers(settings, config).items()}
    service = NotifierService(settings, config, receivers)  # type: ignore[arg-type]
    persists: list[float] = []
    persist = service._persist

    async def timed_persist() -> None:
        t0 = time.perf_counter()
        await persist()
        persists.append(time.perf_counter() - t0)

    service._persist = timed_persist  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(service.run(stop))
    while not service.active and not task.done():
        await asyncio.sleep(0.02)
    Path(ready_path).write_text("ready")
    await task
    result = {
        "created": [[n.group_id, n.kind, n.ts] for n in service.created],
        "sends": [s for r in receivers.values() for s in r.sends],
        "persist_s": persists,
        "commit_s": commits,
        "ingested": service.ingested,
        "tick_s": settings.notifier.tick_s,
    }
    tmp = Path(result_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(result_path)


# --- parent: receivers on loopback ---------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def serve_receiver(receiver: str) -> AsyncIterator[tuple[str, Callable[[], list[tuple[str, str, float]]]]]:
    """A loopback receiver; yields (url for the config, arrivals()) where arrivals() lists
    (group_id, kind, time.time() on arrival) of the requests that carry a page or a resolve."""
    if receiver == "slack":
        from tests.notifier.slack_server import serve_slack

        offset = time.time() - time.monotonic()  # FakeSlack stamps arrivals with time.monotonic()
        async with serve_slack() as fake:

            def slack_arrivals() -> list[tuple[str, str, float]]:
                out = []
                for r in list(fake.requests):
                    text = str(r.body.get("text") or "")
                    if r.api == "chat.postMessage" and not r.body.get("thread_ts") and text.startswith("[FIRING]"):
                        out.append((_summary_id(text), "opened", r.at + offset))
                    elif r.api == "chat.update" and text.startswith("[RESOLVED]"):
                        out.append((_summary_id(text), "resolved", r.at + offset))
                return out

            yield fake.base_url, slack_arrivals
        return
    from tests.notifier.webhook_server import FakeRemediation

    fake = FakeRemediation(WEBHOOK_SECRET)
    arrivals: list[tuple[str, str, float]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        at = time.time()
        response = await fake.handle(request)
        delivery = fake.deliveries[-1]
        if delivery.error is None:
            doc = delivery.json
            arrivals.append((doc["group_id"], doc["kind"], at))
        return response

    app = web.Application()
    app.router.add_post("/hooks/tailhound", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hooks/tailhound", lambda: list(arrivals)
    finally:
        await runner.cleanup()


def _summary_id(text: str) -> str:
    """The incident id the bench put into the summary (``... bench inc-bench-...``)."""
    return next((w for w in text.split() if w.startswith("inc-bench-")), "")


def bench_events(n: int, spacing_s: float, resolve_after_s: float, t0: float, run: str) -> list[tuple[float, Any]]:
    """(offset, IncidentEvent): `n` openings `spacing_s` apart, each resolved `resolve_after_s` later."""
    from tests.notifier.factories import incident_event

    out = []
    for i in range(n):
        iid = f"inc-bench-{run}-{i:04d}"
        at = i * spacing_s
        summary = f"GPU 2 throttles for heat; bench {iid}"
        common = dict(incident_id=iid, node=f"gpu-node-{i % 16 + 1}", summary=summary, opened_at=t0 + at)
        out.append((at, incident_event(ts=t0 + at, **common)))
        out.append(
            (
                at + resolve_after_s,
                incident_event(
                    event="resolved",
                    sequence=2,
                    ts=t0 + at + resolve_after_s,
                    resolved_at=t0 + at + resolve_after_s,
                    **common,
                ),
            )
        )
    out.sort(key=lambda item: item[0])
    return out


async def record_times(settings: Settings) -> dict[tuple[str, str], tuple[float, int]]:
    """(incident_id, event) -> (record timestamp in s, timestamp type) of every incident event on the topic."""
    consumer = make_consumer(settings, settings.incidents_topic, group_id=None)
    await consumer.start()
    out: dict[tuple[str, str], tuple[float, int]] = {}
    try:
        from aiokafka import TopicPartition

        tp = TopicPartition(settings.incidents_topic, 0)
        end = (await consumer.end_offsets([tp]))[tp]
        deadline = time.monotonic() + 30
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for rec in records:
                    doc = json.loads(rec.value)
                    out[(doc["incident_id"], doc["event"])] = (rec.timestamp / 1000, rec.timestamp_type)
    finally:
        await consumer.stop()
    return out


async def _stop(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


async def one_pass(
    broker_url: str, variant: str, n: int, spacing_s: float, resolve_after_s: float, workdir: Path
) -> dict:
    receiver, fetch_wait = VARIANTS[variant]
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        broker=broker_url,
        topic_prefix=f"bench{run}.",
        partitions=1,
        streams={"app_id": f"bench-notify-{run}", "data_dir": workdir / run},
        notifier={"webhook_allowed_hosts": ["127.0.0.1"]},
    )
    await ensure_topics(settings)
    ready, result, log = workdir / f"{run}.ready", workdir / f"{run}.json", workdir / f"{run}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    from tests.notifier.slack_server import TOKEN

    env.update(PYTHONPATH=str(ROOT), **{SECRET_ENV: WEBHOOK_SECRET, TOKEN_ENV: TOKEN})
    sent: dict[tuple[str, str], float] = {}
    async with serve_receiver(receiver) as (url, arrivals):
        cfg = workdir / f"{run}.yaml"
        cfg.write_text(config_yaml(receiver, url))
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.notifier_lag",
                    "child",
                    settings.model_dump_json(),
                    str(cfg),
                    str(ready),
                    str(result),
                    str(fetch_wait or ""),
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
            deadline = time.monotonic() + 90
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"notifier child did not become active:\n{_tail(log)}")
                await asyncio.sleep(0.05)
            producer = make_producer(settings, linger_ms=0)  # the Faust producer's linger (0), acks all
            await producer.start()
            try:
                t0 = time.time() + 0.2
                futures = []
                for offset, ev in bench_events(n, spacing_s, resolve_after_s, t0, run):
                    await asyncio.sleep(max(t0 + offset - time.time(), 0.0))
                    sent[(ev.incident_id, ev.event)] = time.time()
                    futures.append(
                        await producer.send(settings.incidents_topic, key=ev.key(), value=ev.model_dump_json().encode())
                    )
                await asyncio.gather(*futures)
            finally:
                await producer.stop()
            deadline = time.monotonic() + 60
            while len(arrivals()) < 2 * n and time.monotonic() < deadline and proc.poll() is None:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # let the last delivery's state write land before the stop
        finally:
            await _stop(proc)
        got = arrivals()
    if not result.exists():
        raise RuntimeError(f"notifier child wrote no result (exit {proc.returncode}):\n{_tail(log)}")
    child = json.loads(result.read_text())
    records = await record_times(settings)
    return measure(variant, n, sent, records, got, child)


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


# --- numbers -------------------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
    }


def measure(variant: str, n: int, sent: dict, records: dict, arrivals: list, child: dict) -> dict:
    first_arrival: dict[tuple[str, str], float] = {}
    duplicates = 0
    for gid, kind, at in arrivals:
        if (gid, kind) in first_arrival:
            duplicates += 1
        else:
            first_arrival[(gid, kind)] = at
    created = {(g, k): ts for g, k, ts in child["created"]}
    handed = {(g, k): t0 for g, k, t0, _ in child["sends"]}
    lags: dict[str, list[float]] = {k: [] for k in KINDS}
    parts: dict[str, list[float]] = {"fetch": [], "notify": [], "http": []}
    skew = []
    for key, at in first_arrival.items():
        rec = records.get(key)
        if rec is None or key[1] not in lags:
            continue
        rts = rec[0]
        lags[key[1]].append(at - rts)
        if key in sent:
            skew.append(rts - sent[key])
        if key in created and key in handed:
            parts["fetch"].append(created[key] - rts)
            parts["notify"].append(handed[key] - created[key])
            parts["http"].append(at - handed[key])
    missing = 2 * n - sum(len(v) for v in lags.values())
    return {
        "variant": variant,
        "n": n,
        "missing": missing,
        "duplicates": duplicates,
        "lag": {k: summary(v) for k, v in lags.items()},
        "parts": {k: summary(v) for k, v in parts.items()},
        "persist": summary(child["persist_s"]) if child["persist_s"] else None,
        "commit": summary(child["commit_s"]) if child["commit_s"] else None,
        "persists": len(child["persist_s"]),
        "ingested": child["ingested"],
        "tick_s": child["tick_s"],
        "timestamp_types": sorted({t for _, t in records.values()}),
        "record_minus_send_ms": summary([1000 * s for s in skew]) if skew else None,
    }


async def run(
    n: int = 200,
    reps: int = 3,
    spacing_s: float = 0.05,
    resolve_after_s: float = 2.0,
    variants: tuple[str, ...] = tuple(VARIANTS),
) -> dict:
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="tailhound-bench-") as tmp:
        for rep in range(reps):
            for variant in variants:
                out = await one_pass(broker.url, variant, n, spacing_s, resolve_after_s, Path(tmp))
                runs[variant].append(out)
                lag = out["lag"]
                print(
                    f"  rep {rep + 1}/{reps} {variant}: opened p99 {1000 * lag['opened']['p99']:.0f} ms, "
                    f"resolved p99 {1000 * lag['resolved']['p99']:.0f} ms, missing {out['missing']}",
                    file=sys.stderr,
                )
    return {"n": n, "reps": reps, "spacing_s": spacing_s, "resolve_after_s": resolve_after_s, "runs": runs}


def _ms(v: float) -> str:
    return f"{1000 * v:,.0f}"


def _med(runs: list[dict], *path: str) -> float:
    vals = []
    for r in runs:
        x: Any = r
        for p in path:
            x = x[p]
        vals.append(x)
    return statistics.median(vals)


def report(result: dict) -> str:
    runs_by = {v: rs for v, rs in result["runs"].items() if rs}
    lines = [
        f"{result['n']} incidents {1000 * result['spacing_s']:.0f} ms apart, each resolved "
        f"{result['resolve_after_s']:g} s after it opened ({2 * result['n']} events per run); milliseconds "
        f"from the Kafka record timestamp to the request at the receiver; medians over {result['reps']} "
        f"run(s) of each run's percentile, then each run's p99 and max.",
        "",
        "| receiver | event | p50 | p90 | p99 | max | runs: p99 | runs: max |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for variant, runs in runs_by.items():
        for kind in KINDS:
            lines.append(
                f"| {LABELS[variant]} | {kind} | {_ms(_med(runs, 'lag', kind, 'p50'))} "
                f"| {_ms(_med(runs, 'lag', kind, 'p90'))} | **{_ms(_med(runs, 'lag', kind, 'p99'))}** "
                f"| {_ms(_med(runs, 'lag', kind, 'max'))} "
                f"| {', '.join(_ms(r['lag'][kind]['p99']) for r in runs)} "
                f"| {', '.join(_ms(r['lag'][kind]['max']) for r in runs)} |"
            )
    lines += [
        "",
        "Where the time goes (opened and resolved together; medians over the runs, ms):",
        "",
        "| receiver | stage | p50 | p90 | p99 | max |",
        "|---|---|---:|---:|---:|---:|",
    ]
    stages = {
        "fetch": "record timestamp -> the notifier's poll returned it (fetch, decode)",
        "notify": "poll -> handed to the receiver (ingest, flush, state write, commit, pump)",
        "http": "handed to the receiver -> request arrived (HTTP)",
    }
    for variant, runs in runs_by.items():
        for part, label in stages.items():
            if runs[0]["parts"][part]["n"]:
                lines.append(
                    f"| {variant} | {label} | {_ms(_med(runs, 'parts', part, 'p50'))} "
                    f"| {_ms(_med(runs, 'parts', part, 'p90'))} | {_ms(_med(runs, 'parts', part, 'p99'))} "
                    f"| {_ms(_med(runs, 'parts', part, 'max'))} |"
                )
        for what in ("persist", "commit"):
            if all(r[what] for r in runs):
                label = (
                    "state write (`_persist`: send + wait for the broker)"
                    if what == "persist"
                    else "incidents offset commit"
                )
                lines.append(
                    f"| {variant} | ... of which {label}, per loop | {_ms(_med(runs, what, 'p50'))} "
                    f"| {_ms(_med(runs, what, 'p90'))} | {_ms(_med(runs, what, 'p99'))} "
                    f"| {_ms(_med(runs, what, 'max'))} |"
                )
    checks = []
    for variant, runs in runs_by.items():
        for r in runs:
            skew = r["record_minus_send_ms"]
            checks.append(
                f"{variant}: {r['missing']} missing, {r['duplicates']} duplicates, {r['ingested']} events "
                f"ingested, {r['persists']} state writes, record timestamp - send p50 "
                f"{skew['p50']:.1f} ms"
                if skew
                else f"{variant}: no record timestamps"
            )
    types = sorted({t for runs in runs_by.values() for r in runs for t in r["timestamp_types"]})
    lines += ["", "Checks per run: " + "; ".join(checks) + f". Record timestamp types: {types} (0 = CreateTime).", ""]
    if "webhook" in runs_by:
        p99 = _med(runs_by["webhook"], "lag", "opened", "p99")
        p99r = _med(runs_by["webhook"], "lag", "resolved", "p99")
        met = max(p99, p99r) < TARGET_P99_S
        lines.append(
            f"Target: webhook p99 < {_ms(TARGET_P99_S)} ms: {'met' if met else 'not met'} "
            f"(opened {_ms(p99)} ms, resolved {_ms(p99r)} ms)."
        )
    return "\n".join(lines)


def target_met(result: dict) -> bool | None:
    runs = result["runs"].get("webhook")
    if not runs:
        return None
    return max(_med(runs, "lag", k, "p99") for k in KINDS) < TARGET_P99_S


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        asyncio.run(child_main(*sys.argv[2:7]))
    else:
        with contextlib.suppress(KeyboardInterrupt):
            print(report(asyncio.run(run(n=int(sys.argv[1]) if len(sys.argv) > 1 else 200))))
