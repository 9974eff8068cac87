"""A notifier API with a few incidents behind it, for the console's route and access tests: two open
incidents (a thermal throttle with chart data whose page is being retried, a KV-cache one delivered) and a
resolved one whose group the pipeline is done with (a recent group)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from tailhound.errors import DeliveryError
from tailhound.incident import EvidenceSeries, Scope
from tailhound.notifier.api import ApiAccess, serve
from tailhound.notifier.config import parse_config
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.state import Silence
from tests.notifier.factories import T0, incident_event

TOKEN = "tok-console-0123456789abcdef"
THERMAL = "inc-00000000000000a1"
KV = "inc-00000000000000b2"
OLD = "inc-00000000000000c3"
NOW = T0 + 5000

CONFIG = """
grouping: {by: [incident], wait: 0s, interval: 0s}
flap: {window: 10m, max_flips: 100, min_flip_interval: 0s}
route: {receiver: slack}
receivers: [{type: console, name: slack}]
"""


def temperature_series() -> EvidenceSeries:
    ts = [T0 - 150.0 + 15.0 * i for i in range(10)]
    return EvidenceSeries(
        rule="gpu-thermal-throttle",
        signal="gpu.temperature",
        unit="C",
        op=">=",
        threshold=85.0,
        for_s=60,
        per="gpu",
        focus=["2"],
        ts=ts,
        values={"2": [80.0 + i for i in range(10)], "3": [62.0] * 10},
        baseline={"2": [63.0] * 10},
        pending_since=T0 - 60,
    )


def populated_notifier() -> Notifier:
    nf = Notifier(parse_config(CONFIG))
    # resolved long ago: paged, resolved, collected into the recent groups
    nf.ingest([incident_event(incident_id=OLD, node="gpu-node-9", root_cause="network-path", ts=T0 - 4000)], T0 - 4000)
    nf.flush(T0 - 4000)
    nf.delivered(OLD, "slack", 1, {}, T0 - 3999)
    nf.ingest(
        [
            incident_event(
                incident_id=OLD,
                event="resolved",
                sequence=2,
                node="gpu-node-9",
                root_cause="network-path",
                ts=T0 - 3900,
            )
        ],
        T0 - 3900,
    )
    nf.flush(T0 - 3900)
    nf.delivered(OLD, "slack", 2, {}, T0 - 3899)
    nf.flush(T0 - 3000)
    assert OLD in nf.recent and OLD not in nf.groups
    # open: a thermal throttle with charts, its page failing; a KV-cache incident delivered
    nf.ingest([incident_event(incident_id=THERMAL, severity="critical", series=[temperature_series()])], T0)
    nf.ingest(
        [
            incident_event(
                incident_id=KV,
                root_cause="kv-cache-pressure",
                node="gpu-node-1",
                ts=T0 + 10,
                summary="KV cache 97% on gpu-node-1",
                opened_at=T0 + 10,
                scope=Scope(node="gpu-node-1", engine="vllm-0", model="llama-3-8b"),
            )
        ],
        T0 + 10,
    )
    nf.flush(T0 + 10)
    nf.failed(THERMAL, "slack", 1, DeliveryError("HTTP 503 from hooks.slack.com", retryable=True), T0 + 11, 30.0)
    nf.delivered(KV, "slack", 1, {}, T0 + 12)
    return nf


class FakeService:
    """What the API needs of the notifier service (silences kept in memory instead of the state topic)."""

    def __init__(self, notifier: Notifier | None = None) -> None:
        self.notifier = notifier if notifier is not None else populated_notifier()
        self.active = True
        self.ingested = 0
        self.api_port: int | None = None
        self.clock = lambda: NOW
        self.written: list[Silence] = []

    async def write_silence(self, silence: Silence) -> None:
        self.written.append(silence)
        self.notifier.silences[silence.id] = silence


@asynccontextmanager
async def api(
    access: ApiAccess | None = None, *, console: bool = True, service: FakeService | None = None
) -> AsyncIterator[tuple[FakeService, str]]:
    service = service if service is not None else FakeService()
    runner = await serve(service, "127.0.0.1:0", access, console=console)
    try:
        yield service, f"http://127.0.0.1:{service.api_port}"
    finally:
        await runner.cleanup()


async def fetch(
    base: str,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    cookies: dict[str, str] | None = None,
    **kw: Any,
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body or text) without following redirects."""
    async with (
        aiohttp.ClientSession(cookies=cookies) as http,
        http.request(method, f"{base}{path}", headers=headers or {}, allow_redirects=False, **kw) as r,
    ):
        text = await r.text()
        body: Any = text
        if r.content_type == "application/json":
            body = await r.json()
        return r.status, dict(r.headers), body


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
