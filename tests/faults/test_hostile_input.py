"""Fault drill: hostile input (items 2 and 3 of the hardening issue), against a real worker on the bundled broker.

A simulated fleet with a real fault (thermal throttling on gpu-node-1) publishes its telemetry while hostile
messages of every kind are interleaved on the same topic: oversized, non-UTF-8, bad JSON, empty, keyed by
another node, NaN and infinite values, negative deltas, huge label counts and lengths, too many samples,
snapshots dated 10 years ahead. Every hostile message must come out as exactly one dead letter whose kind
names what was wrong, the worker must stay up with a bounded RSS, every valid snapshot must be evaluated
and the fault must still be diagnosed.

Before: a 1.2 MB non-UTF-8 message made a dead letter over the producer's 1 MiB limit, the send raised, the
agent crashed and was restarted 5 s later (every partition stalled) and the message was lost without a dead
letter (:func:`test_an_oversized_binary_message_is_dead_lettered_and_nothing_stalls`).

Figures: messages sent by kind, dead letters by kind, lost, duplicated, valid snapshots dropped, worker RSS.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.deadletter import MAX_PAYLOAD_BYTES, DeadLetter
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.snapshot import Snapshot
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.faults.conftest import scale
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]

TEN_YEARS = 10 * 365 * 86_400.0
FAULT = "thermal-throttle@2m+6m:node=gpu-node-1:gpus=3,5"
INTAKE = re.compile(r"intake: (\d+) accepted, (\d+) redelivered")
#: hostile messages of these kinds are large (~1 MB): a few of them, whatever the drill's size
HEAVY = ("oversized", "too_many_samples")


def _json(obj: dict) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


def _valid(node: str) -> dict:
    return dcgm_snapshot(time.time() - 60, node=node, gpus=2).model_dump(mode="json")


def _with(node: str, **over) -> bytes:
    return _json({**_valid(node), **over})


def _sample(**over) -> dict:
    return {"kind": "gauge", "name": "DCGM_FI_DEV_GPU_TEMP", "value": 60.0, "labels": {"gpu": "0"}, **over}


#: kind of hostile message -> (the dead letter's kind, make(rng, node) -> (key, value))
HOSTILE: dict[str, tuple[str, Callable[[random.Random, str], tuple[bytes, bytes]]]] = {
    "oversized": ("oversized", lambda r, n: (n.encode(), b"\xff" + r.randbytes(1_200_000))),
    "too_many_samples": (
        "too_many_samples",
        lambda r, n: (
            n.encode(),
            json.dumps(
                {
                    "ts": time.time(),
                    "node": n,
                    "source": "dcgm",
                    "samples": [{"kind": "gauge", "name": "g", "value": 1}] * 20_001,
                },
                separators=(",", ":"),
            ).encode(),
        ),
    ),
    "not_utf8": ("not_utf8", lambda r, n: (n.encode(), b"\xc3\x28" + r.randbytes(r.randint(10, 3000)))),
    "bad_json": ("bad_json", lambda r, n: (n.encode(), _with(n)[: r.randint(1, 400)])),
    "empty": ("empty", lambda r, n: (n.encode(), b"")),
    "wrong_key": ("wrong_key", lambda r, n: (b"gpu-node-2" if n != "gpu-node-2" else b"gpu-node-1", _with(n))),
    "nan_gauge": ("non_finite", lambda r, n: (n.encode(), _with(n, samples=[_sample(value=math.nan)]))),
    "inf_interval": ("non_finite", lambda r, n: (n.encode(), _with(n, interval_s=math.inf))),
    "nan_histogram_delta": (
        "non_finite",
        lambda r, n: (
            n.encode(),
            _with(
                n,
                samples=[
                    {
                        "kind": "histogram",
                        "name": "h",
                        "le": [0.1, 1.0],
                        "counts": [1, 2],
                        "count": 3,
                        "sum": 1.0,
                        "delta": {"counts": [math.nan, 1], "count": 1, "sum": 0.5},
                    }
                ],
            ),
        ),
    ),
    "negative_delta": (
        "out_of_range",
        lambda r, n: (
            n.encode(),
            _with(
                n,
                samples=[
                    {
                        "kind": "counter",
                        "name": "DCGM_FI_PROF_NVLINK_TX_BYTES",
                        "value": 5.0,
                        "delta": -r.randint(1, 10**9),
                    }
                ],
            ),
        ),
    ),
    "many_labels": (
        "too_many_labels",
        lambda r, n: (
            n.encode(),
            _with(n, samples=[_sample(labels={f"l{i}": "v" for i in range(r.randint(65, 5000))})]),
        ),
    ),
    "long_label": (
        "label_too_long",
        lambda r, n: (n.encode(), _with(n, samples=[_sample(labels={"gpu": "v" * r.randint(4097, 200_000)})])),
    ),
    "future_ts": ("future_ts", lambda r, n: (n.encode(), _with(n, ts=time.time() + TEN_YEARS))),
    "schema": ("invalid", lambda r, n: (n.encode(), _with(n, ts="soon"))),
}


def _intake(text: str) -> tuple[int, int] | None:
    found = INTAKE.findall(text)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _with_stats(settings):
    return settings.model_copy(update={"streams": settings.streams.model_copy(update={"stats_interval_s": 0.5})})


async def _wait_for_intake(worker: WorkerProcess, total: int, timeout: float) -> tuple[int, int] | None:
    deadline = time.monotonic() + timeout
    counts = _intake(worker.log_path.read_text(errors="replace"))
    while (counts is None or sum(counts) < total) and time.monotonic() < deadline and worker.alive():
        await asyncio.sleep(0.5)
        counts = _intake(worker.log_path.read_text(errors="replace"))
    return counts


async def test_hostile_messages_of_every_kind_are_dead_lettered_and_the_fault_is_still_diagnosed(
    settings, tmp_path, drill_report
):
    settings = _with_stats(settings)
    await ensure_topics(settings)
    rng = random.Random(13)
    nodes, minutes = scale(2, 4), scale(10, 40)
    hostile_total = scale(300, 10_000)
    heavy_each = scale(2, 25)
    sim = FleetSimulator(SimConfig(nodes=nodes, seed=5), [FaultSpec.parse(FAULT)])
    ticks = int(minutes * 60 / sim.config.interval_s)
    light = [k for k in HOSTILE if k not in HEAVY]
    plan = [k for k in HEAVY for _ in range(heavy_each)]
    plan += [light[i % len(light)] for i in range(hostile_total - len(plan))]
    rng.shuffle(plan)
    per_tick = math.ceil(len(plan) / ticks)

    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    rss: list[float] = []
    sent: Counter[str] = Counter()
    expected: Counter[str] = Counter()
    valid = 0
    t0 = time.monotonic()

    async def sample_rss(stop: asyncio.Event) -> None:
        while not stop.is_set() and worker.alive():
            rss.append(_rss_mb(worker.proc.pid))
            await asyncio.sleep(0.25)

    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_rss(stop))
    try:
        await asyncio.sleep(3)  # started, before any telemetry
        baseline = max(rss or [0.0])
        producer = make_producer(settings, max_request_size=4 * 1024 * 1024)
        await producer.start()
        try:
            for tick in range(ticks):
                _, snaps = sim.step()
                futures = [
                    await producer.send(settings.telemetry_topic, key=s.key(), value=s.model_dump_json().encode())
                    for s in snaps
                ]
                valid += len(snaps)
                for kind in plan[tick * per_tick : (tick + 1) * per_tick]:
                    expect, make = HOSTILE[kind]
                    key, value = make(rng, rng.choice(sim.node_names))
                    futures.append(await producer.send(settings.telemetry_topic, key=key, value=value))
                    sent[kind] += 1
                    expected[expect] += 1
                await asyncio.gather(*futures)
        finally:
            await producer.stop()
        published_s = time.monotonic() - t0
        hostile = sum(sent.values())
        records = await consume(
            settings,
            settings.deadletter_topic,
            lambda rs: len(rs) >= hostile,
            timeout=scale(60, 600),
            alive=worker.alive,
        )
        counts = await _wait_for_intake(worker, valid, timeout=scale(30, 300))
        incidents = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=30, alive=worker.alive
        )
        alive = worker.alive()
        log_text = worker.log_path.read_text(errors="replace")
    finally:
        stop.set()
        await sampler
        worker.stop()

    letters = [DeadLetter.model_validate_json(r.value) for r in records]
    got = Counter(d.kind for d in letters)
    positions = Counter((d.partition, d.offset) for d in letters)
    duplicated = sum(n - 1 for n in positions.values())
    lost = max(hostile - len(positions), 0)
    accepted, redelivered = counts if counts is not None else (0, 0)
    events = [IncidentEvent.model_validate_json(r.value) for r in incidents]
    thermal = [e for e in events if e.root_cause == "gpu-thermal-throttle" and e.event == "opened"]
    drill_report(
        nodes=nodes,
        fleet_minutes=minutes,
        valid_snapshots=valid,
        valid_accepted=accepted,
        valid_dropped=valid - accepted + redelivered,
        hostile_sent=hostile,
        hostile_by_kind=dict(sent),
        dead_letters=len(letters),
        dead_letters_by_kind=dict(got),
        lost=lost,
        duplicated=duplicated,
        rss_baseline_mb=round(baseline, 1),
        rss_max_mb=round(max(rss), 1),
        incidents_opened=[f"{e.root_cause} {e.scope.describe()}" for e in thermal],
        publish_s=round(published_s, 1),
        wall_s=round(time.monotonic() - t0, 1),
    )
    assert alive, log_text[-3000:]
    assert "could not produce the dead letter" not in log_text and "crashed" not in log_text.lower()
    assert got == expected, (got, expected)  # each reason counted, and nothing else
    assert lost == 0 and duplicated == 0
    assert counts is not None and accepted == valid and redelivered == 0
    assert thermal and thermal[0].scope.node == "gpu-node-1" and thermal[0].scope.gpus == ["3", "5"]
    assert max(rss) < baseline + 250, (baseline, max(rss))  # bounded: the heavy messages are not kept


async def test_an_oversized_binary_message_is_dead_lettered_and_nothing_stalls(settings, tmp_path):
    settings = _with_stats(settings)
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    raw = b"\xff\xfe" + os.urandom(1_200_000)  # 1.2 MB, not UTF-8
    try:
        producer = make_producer(settings, max_request_size=4 * 1024 * 1024)
        await producer.start()
        base = time.time() - 3600
        try:
            await producer.send_and_wait(settings.telemetry_topic, key=b"gpu-node-1", value=raw)
            for i in range(12):  # then a real fault on the same node, and another node on the other partitions
                for node in ("gpu-node-1", "gpu-node-7"):
                    snap: Snapshot = dcgm_snapshot(base + 15 * i, node=node, hot={2: (90.0, 1000.0)})
                    await producer.send_and_wait(
                        settings.telemetry_topic, key=snap.key(), value=snap.model_dump_json().encode()
                    )
        finally:
            await producer.stop()
        letters = await consume(
            settings, settings.deadletter_topic, lambda rs: len(rs) >= 1, timeout=60, alive=worker.alive
        )
        incidents = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=60, alive=worker.alive
        )
        counts = await _wait_for_intake(worker, 24, timeout=30)
        log_text = worker.log_path.read_text(errors="replace")
        assert worker.alive(), log_text[-3000:]
    finally:
        worker.stop()
    assert len(letters) == 1, log_text[-3000:]  # before: none, the agent crashed producing it
    d = DeadLetter.model_validate_json(letters[0].value)
    assert d.kind == "oversized" and d.stage == "limits" and d.payload_truncated
    assert d.payload_size == len(raw) and d.payload_sha256 == hashlib.sha256(raw).hexdigest()
    assert d.original_bytes() == raw[:MAX_PAYLOAD_BYTES] and len(letters[0].value) < 100_000
    assert "crashed" not in log_text.lower()
    assert counts == (24, 0)  # every valid snapshot evaluated, none lost
    events = [IncidentEvent.model_validate_json(r.value) for r in incidents]
    assert events[0].event == "opened" and events[0].root_cause == "gpu-thermal-throttle"
