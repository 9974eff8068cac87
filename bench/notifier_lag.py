"""Notifier detection-to-delivery lag: incident event on the incidents topic -> request at a receiver.

The harness (this process) runs the bundled broker, a loopback receiver and a producer (:mod:`.notifier_harness`);
the real notifier service runs as its own process (:mod:`.notifier_child`) at the default settings and config,
except the two deliberate holds (``grouping.wait``, ``flap.min_flip_interval``: 0 s), which this benchmark
leaves out. Once the child holds the incidents partition the harness produces `n` incidents ``spacing_s`` apart,
each resolved ``resolve_after_s`` later, with the streams worker's producer settings (linger 0, acks all).

Lag = arrival at the receiver minus the Kafka record timestamp of the incident event. The breakdown: record ->
the notification's ``ts`` (fetch + decode), ``ts`` -> hand-over to the receiver (ingest, flush, state persist,
offset commit, scheduling), hand-over -> arrival (the receiver's HTTP request). Receivers: the signed webhook
and Slack in bot mode (``min_interval_s: 0``: Slack's pacing would make the lag the queue length, by design);
``webhook-fetch-wait-100`` is a what-if (the incidents consumer's ``fetch_max_wait_ms`` at 100, not 500). Each
pass uses fresh topics and a fresh group; runs are repeated `reps` times, their percentiles' medians reported.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from typing import Any

from tailhound.broker import EmbeddedBroker, _die_with_parent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.settings import Settings

from .notifier_child import SECRET_ENV, TOKEN_ENV, WEBHOOK_SECRET, config_yaml
from .notifier_harness import bench_events, record_times, serve_receiver

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
KINDS = ("opened", "resolved")


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
                    "bench.notifier_child",
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
    with contextlib.suppress(KeyboardInterrupt):
        print(report(asyncio.run(run(n=int(sys.argv[1]) if len(sys.argv) > 1 else 200))))
