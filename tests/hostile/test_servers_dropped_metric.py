"""Dropped connections are a metric (tailhound/http_guard.py): a header timeout, a body timeout, the per-client
and the total connection limit each count under their reason in ``*_http_connections_dropped_total`` on the
ingest's, the notifier API's and the worker endpoint's /metrics; an idle keep-alive connection closed after a
whole answer is not a drop. Real loopback sockets, short limits."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tailhound.http_guard import DROP_REASONS, ServerLimits
from tailhound.notifier.api import ApiAccess, start_site
from tailhound.worker import web as worker_web
from tests.hostile.slow_clients import closed_by_server, connect, drip
from tests.hostile.test_servers_slow_clients import FAST, ingest_server
from tests.hostile.test_yaml_reload import reloader_on


async def scrape(port: int, name: str) -> dict[str, float]:
    """`name`'s samples by reason, read from the server's own /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == f"{name}_total"
    }


async def hostile_clients(port: int, path: str) -> None:
    """One of each drop: a dripped body, an idle connection, one past the per-client limit (2 held from
    127.0.0.4), and one whole request whose keep-alive connection then idles (no drop)."""
    held = [await connect(port, "127.0.0.4") for _ in range(2)]
    extra_reader, extra_writer = await connect(port, "127.0.0.4")
    assert await closed_by_server(extra_reader, timeout_s=5) == b""  # per_client_limit
    extra_writer.close()
    reader, writer = await connect(port, "127.0.0.5")
    writer.write(b"GET /-/healthy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # keep-alive: stays open, then idles
    answered = await closed_by_server(reader, timeout_s=5)
    assert answered is not None and answered.startswith(b"HTTP/1.1 200"), answered
    writer.close()
    slow = await drip(port, "127.0.0.2", path, interval_s=0.2)  # body_timeout
    assert slow is not None and slow.startswith(b"HTTP/1.1 408"), slow
    for r, _ in held:  # both idle: header_timeout
        assert await closed_by_server(r, timeout_s=10) is not None
    for _, w in held:
        w.close()
    await asyncio.sleep(0.1)


EXPECTED = {"header_timeout": 2.0, "body_timeout": 1.0, "per_client_limit": 1.0, "total_limit": 0.0}


def test_the_ingest_exports_each_reason():
    async def main():
        server = await ingest_server(FAST.model_copy(update={"max_per_client": 2}))
        try:
            before = await scrape(server.port, "tailhound_ingest_http_connections_dropped")
            await hostile_clients(server.port, "/api/v1/write")
            return before, await scrape(server.port, "tailhound_ingest_http_connections_dropped")
        finally:
            await server.stop()

    before, after = asyncio.run(main())
    assert before == dict.fromkeys(DROP_REASONS, 0.0)
    assert after == EXPECTED


def test_the_notifier_api_exports_each_reason():
    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=str(len(await request.read())))

    async def metrics(_request: web.Request) -> web.Response:
        from prometheus_client import generate_latest

        return web.Response(body=generate_latest(registry), content_type="text/plain")

    async def healthy(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    registry = CollectorRegistry()

    async def main():
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_post("/api/v1/silences", echo)
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/-/healthy", healthy)
        runner, port, _ = await start_site(
            app, "127.0.0.1:0", FAST.model_copy(update={"max_per_client": 2}), registry=registry
        )
        try:
            await hostile_clients(port, "/api/v1/silences")
            return await scrape(port, "tailhound_notifier_http_connections_dropped")
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == EXPECTED


def test_the_worker_endpoint_exports_the_total_limit(tmp_path, monkeypatch):
    """The worker endpoint's own /metrics (worker_web.serve): a connection past the total limit counts."""
    reloader, registry = reloader_on(tmp_path, [])
    tight = ServerLimits(header_timeout_s=5, body_timeout_s=5, max_per_client=100, max_connections=2)
    monkeypatch.setattr("tailhound.notifier.api.ServerLimits", lambda: tight)

    async def main():
        runner, port = await worker_web.serve("127.0.0.1:0", registry, reloader, ApiAccess(), lambda: (True, ""))
        try:
            held = [await connect(port, "127.0.0.6") for _ in range(2)]
            extra_reader, extra_writer = await connect(port, "127.0.0.7")
            refused = await closed_by_server(extra_reader, timeout_s=5)
            extra_writer.close()
            for _, w in held:
                w.close()
            await asyncio.sleep(0.2)  # the server sees the closes
            return refused, await scrape(port, "tailhound_worker_http_connections_dropped")
        finally:
            await runner.cleanup()

    refused, after = asyncio.run(main())
    assert refused == b""
    assert after == {**dict.fromkeys(DROP_REASONS, 0.0), "total_limit": 1.0}
