from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web
from pydantic import ValidationError

from tailhound.agents.collectors import CollectError, Collector
from tailhound.agents.collectors.nginx import NginxCollector, NginxConfig, parse_stub_status, render_stub_status
from tailhound.agents.exposition import parse_exposition, to_samples

pytestmark = pytest.mark.timeout(60)
# Exactly what ngx_http_stub_status_module prints (a space before every newline but the header's).
STUB_STATUS = (
    "Active connections: 291 \n"
    "server accepts handled requests\n"
    " 16630948 16630948 31070465 \n"
    "Reading: 6 Writing: 179 Waiting: 106 \n"
)


def by_name(body: str) -> dict:
    return {s.name: s for s in to_samples(parse_exposition(body))}


@pytest.fixture
async def nginx_url():
    requests = {"count": 0}

    async def status(request: web.Request) -> web.Response:
        requests["count"] += 1
        return web.Response(text=STUB_STATUS)

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text="oops")

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="Active connections: 3 \nserver accepts handled requests\n 1 2 \nReading: 0 \n")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text=STUB_STATUS)

    app = web.Application()
    app.router.add_get("/nginx_status", status)
    app.router.add_get("/broken", broken)
    app.router.add_get("/garbage", garbage)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", requests
    finally:
        await asyncio.wait_for(runner.cleanup(), 10)


def test_parse_stub_status_exact_format():
    s = parse_stub_status(STUB_STATUS)
    assert (s.active, s.accepts, s.handled, s.requests) == (291, 16630948, 16630948, 31070465)
    assert (s.reading, s.writing, s.waiting) == (6, 179, 106)
    assert parse_stub_status(STUB_STATUS.replace(" \n", "\n")) == s  # exporter-style, without trailing spaces


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("", "expected 4 lines, got 0"),
        ("<html>Welcome to nginx!</html>", "expected 4 lines, got 1"),
        (STUB_STATUS.replace("Active connections: 291", "Active: 291"), "line 1: expected 'Active connections: N'"),
        (
            STUB_STATUS.replace("server accepts", "server accepted"),
            "line 2: expected 'server accepts handled requests'",
        ),
        (STUB_STATUS.replace(" 16630948 16630948 ", " 16630948 x "), "line 3: expected 'accepts handled requests'"),
        (STUB_STATUS.replace("Waiting: 106", "Waiting: -1"), "line 4: expected 'Reading: N Writing: N Waiting: N'"),
    ],
)
def test_parse_stub_status_errors_name_the_line(text, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_stub_status(text)


def test_render_names_and_kinds():
    samples = by_name(render_stub_status(parse_stub_status(STUB_STATUS), worker_connections=4096))
    gauges = {
        "nginx_connections_active",
        "nginx_connections_reading",
        "nginx_connections_writing",
        "nginx_connections_waiting",
        "nginx_up",
        "tailhound_nginx_worker_connections",
        "tailhound_nginx_connections_utilization_ratio",
    }
    counters = {"nginx_connections_accepted", "nginx_connections_handled", "nginx_http_requests_total"}
    assert set(samples) == gauges | counters
    assert {n for n, s in samples.items() if s.kind == "gauge"} == gauges
    assert {n for n, s in samples.items() if s.kind == "counter"} == counters
    assert samples["nginx_http_requests_total"].value == 31070465
    assert samples["nginx_connections_writing"].value == 179
    assert samples["nginx_up"].value == 1
    assert samples["tailhound_nginx_connections_utilization_ratio"].value == pytest.approx(291 / 4096)


def test_config():
    with pytest.raises(ValidationError):
        NginxConfig(url="http://127.0.0.1/nginx_status", worker_connections=0)
    with pytest.raises(ValidationError):
        NginxConfig(url="ftp://host/x", worker_connections=10)
    with pytest.raises(ValidationError):
        NginxConfig(url="http://127.0.0.1/nginx_status", worker_connections=10, workers=2)
    cfg = NginxConfig(url="http://127.0.0.1/nginx_status", worker_connections=10)
    assert (cfg.interval_s, cfg.timeout_s, cfg.labels) == (5.0, 2.0, {})


async def test_collect_from_test_server_reuses_one_client(nginx_url):
    base, requests = nginx_url
    cfg = NginxConfig(url=f"{base}/nginx_status", worker_connections=2048, labels={"role": "ingress"})
    collector = NginxCollector(cfg, node="gpu-1")
    assert isinstance(collector, Collector)
    [first] = await collector.collect()
    client = collector._client
    [second] = await collector.collect()
    assert collector._client is client and requests["count"] == 2
    await collector.close()
    assert collector._client is None
    assert first.job == "netprobe" and first.node == "gpu-1" and first.labels == {"role": "ingress"}
    assert first.interval_s == 5.0
    samples = by_name(second.body)
    assert samples["nginx_connections_active"].value == 291
    assert samples["tailhound_nginx_worker_connections"].value == 2048
    assert samples["tailhound_nginx_connections_utilization_ratio"].value == pytest.approx(291 / 2048)


async def test_http_500_is_collect_error(nginx_url):
    base, _ = nginx_url
    collector = NginxCollector(NginxConfig(url=f"{base}/broken", worker_connections=10), node="lb-1")
    with pytest.raises(CollectError, match=r"/broken: HTTP 500"):
        await collector.collect()
    await collector.close()


async def test_malformed_page_is_collect_error_naming_the_line(nginx_url):
    base, _ = nginx_url
    collector = NginxCollector(NginxConfig(url=f"{base}/garbage", worker_connections=10))
    with pytest.raises(CollectError, match=r"malformed page: line 3: expected 'accepts handled requests' numbers"):
        await collector.collect()
    await collector.close()


async def test_timeout_is_collect_error(nginx_url):
    base, _ = nginx_url
    collector = NginxCollector(NginxConfig(url=f"{base}/slow", worker_connections=10, timeout_s=0.2))
    with pytest.raises(CollectError, match=r"/slow: timed out after 0.2s"):
        await collector.collect()
    await collector.close()


async def test_connection_refused_is_collect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    collector = NginxCollector(NginxConfig(url=f"http://127.0.0.1:{port}/nginx_status", worker_connections=10))
    with pytest.raises(CollectError, match=r"ConnectorError"):
        await collector.collect()
    await collector.close()
