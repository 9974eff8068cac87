"""Poison pills against a real ``tailhound worker`` on the bundled broker: a 3,000-GPU snapshot, a model name with a
space, a snapshot dated now+290 s and one dated just past the next real one arrive between a sick node's good
traffic. The worker stays up (no exit, no restart), dead-letters each with its kind (the real snapshot after the
last one as out of order), and still opens the sick node's incident."""

from __future__ import annotations

import time

import pytest

from tailhound.agents.wire import encode_snapshot
from tailhound.deadletter import DeadLetter
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics, make_producer
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.hostile.test_pills_state import engine, many_gpus
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
HOT = {5: (90.0, 1000.0)}
KINDS = {"too_many_gpus", "bad_name", "ahead_of_source", "out_of_order"}


async def test_the_worker_dead_letters_each_pill_and_still_diagnoses_the_good_node(settings, tmp_path):
    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log", max_restarts=0)
    worker.start()
    producer = make_producer(settings)
    await producer.start()
    try:
        now = time.time()
        base = now - 15 * 8  # real time: the +290 s pill is ahead of its arrival and of its source

        async def send(snap, key: str = "gpu-node-2") -> None:
            await producer.send_and_wait(settings.telemetry_topic, key=key.encode(), value=encode_snapshot(snap))

        for i in range(20):
            await send(dcgm_snapshot(base + 15 * i, node="gpu-node-2", hot=HOT if i >= 2 else None))
            if i == 3:  # the pills, between the good traffic
                await send(many_gpus(base + 15 * i).model_copy(update={"node": "gpu-node-3"}), key="gpu-node-3")
                await send(engine(base + 15 * i, "Llama 3.1 70B", node="gpu-node-2"))
                await send(dcgm_snapshot(now + 290, node="gpu-node-2", hot=HOT))
            if i == 5:  # inside the lead tolerance, dated after the next real one: that one is out of order
                await send(dcgm_snapshot(base + 15 * 6 + 0.5, node="gpu-node-2"))
        letters = await consume(
            settings,
            settings.deadletter_topic,
            lambda rs: {DeadLetter.model_validate_json(r.value).kind for r in rs} >= KINDS,
            timeout=60,
            alive=worker.alive,
        )
        incidents = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= 1, timeout=60, alive=worker.alive
        )
        assert worker.alive() and worker.restarts == 0, worker.log_tail()
        kinds = sorted(DeadLetter.model_validate_json(r.value).kind for r in letters)
        assert kinds == sorted(KINDS), worker.log_tail()
        opened = [IncidentEvent.model_validate_json(r.value) for r in incidents]
        assert [(e.event, e.root_cause, e.scope.node) for e in opened[:1]] == [
            ("opened", "gpu-thermal-throttle", "gpu-node-2")
        ], worker.log_tail()
    finally:
        await producer.stop()
        worker.stop()
