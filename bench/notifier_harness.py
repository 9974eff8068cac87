"""The harness side of the lag benchmark: loopback receivers, the incident events it produces, their record times.

The receivers (the signed remediation webhook, or Slack in bot mode against the fake Web API) note when each
page or resolve arrives; the events are distinct incidents, one group each, resolved a fixed time after they
open; the record times are read back from the topic (CreateTime, set by the producer at ``send``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from tailhound.kafka import make_consumer
from tailhound.settings import Settings

from .notifier_child import WEBHOOK_SECRET


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
