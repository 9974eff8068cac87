"""Bounded servers (tailhound/http_guard.py) against slow and idle clients on real loopback sockets: bodies
dripped at a few bytes a second no longer hold the ingest's decoding slots (a good sender is answered 204
every time; the drippers get 408), half-open connections are closed after the header timeout, one address
holds at most `max_per_client` connections while others are still served; the notifier API and the worker
endpoint (`start_site`) are bounded the same way."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from tailhound.http_guard import ServerLimits
from tailhound.ingest.metrics import IngestMetrics
from tailhound.ingest.receiver import IngestResult
from tailhound.ingest.server import IngestServer, make_app
from tailhound.notifier.api import start_site
from tests.faults.conftest import scale
from tests.hostile.slow_clients import closed_by_server, connect, drip

FAST = ServerLimits(header_timeout_s=1.0, body_timeout_s=1.0, max_per_client=16, max_connections=1000)
DRIPPERS = scale(8, 64)  # bodies dripped at once (8 per source address)
GOOD = scale(28, 280)  # good requests meanwhile
HALF_OPEN = scale(200, 2000)  # idle and half-sent connections


async def ingest_server(limits: ServerLimits, max_in_flight: int = 8) -> IngestServer:
    server = IngestServer(
        IngestMetrics(),
        max_body_bytes=64 * 1024,
        max_in_flight=max_in_flight,
        retry_after_s=5,
        readiness=lambda: (True, "ready"),
        limits=limits,
    )

    async def accept(body: bytes, headers: dict[str, str]) -> IngestResult:
        return IngestResult(204, None, [], [])

    await server.start(make_app("/api/v1/write", accept, server), "127.0.0.1:0")
    return server


async def good_sends(port: int, count: int) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        for _ in range(count):
            async with http.post(f"http://127.0.0.1:{port}/api/v1/write", data=b"\x00" * 100) as r:
                statuses.append(r.status)
    return statuses


def test_eight_drippers_hold_no_slot_and_get_408():
    async def main():
        server = await ingest_server(FAST)
        try:
            drippers = [
                asyncio.create_task(drip(server.port, f"127.0.1.{2 + i // 8}", "/api/v1/write", interval_s=0.2))
                for i in range(DRIPPERS)
            ]
            await asyncio.sleep(0.3)  # every dripper is connected and sending
            good = await good_sends(server.port, GOOD)
            answers = await asyncio.gather(*drippers)
            return good, answers, server.in_flight
        finally:
            await server.stop()

    good, answers, in_flight = asyncio.run(main())
    assert good == [204] * GOOD
    assert all(a is not None and a.startswith(b"HTTP/1.1 408") for a in answers), answers
    assert in_flight == 0


def test_half_open_connections_are_closed_after_the_header_timeout():
    async def main():
        server = await ingest_server(FAST.model_copy(update={"max_per_client": HALF_OPEN}))
        try:
            conns = [await connect(server.port, "127.0.0.3") for _ in range(HALF_OPEN)]
            for i, (_, writer) in enumerate(conns):
                if i % 2:  # half of them send half a request
                    writer.write(b"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            closed = await asyncio.gather(*(closed_by_server(reader, timeout_s=10) for reader, _ in conns))
            for _, writer in conns:
                writer.close()
            await asyncio.sleep(0.1)
            return closed, dict(server.site.counter.open)
        finally:
            await server.stop()

    closed, still_open = asyncio.run(main())
    assert all(c is not None for c in closed), f"{sum(c is None for c in closed)} of {HALF_OPEN} still open"
    assert still_open == {}


def test_one_address_holds_at_most_max_per_client_connections():
    async def main():
        server = await ingest_server(FAST.model_copy(update={"max_per_client": 4, "header_timeout_s": 30}))
        try:
            held = [await connect(server.port, "127.0.0.2") for _ in range(4)]
            extra_reader, extra_writer = await connect(server.port, "127.0.0.2")
            refused = await closed_by_server(extra_reader, timeout_s=5)
            extra_writer.close()
            good = await good_sends(server.port, 3)  # another address is still served
            held_open = [r.at_eof() for r, _ in held]
            held[0][1].close()
            await asyncio.sleep(0.2)  # the server sees the close
            again_reader, again_writer = await connect(server.port, "127.0.0.2")
            again_writer.write(b"GET /-/healthy HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = await closed_by_server(again_reader, timeout_s=5)
            for _, w in held[1:]:
                w.close()
            return refused, good, held_open, answer, server.site.counter.refused
        finally:
            await server.stop()

    refused, good, held_open, answer, count = asyncio.run(main())
    assert refused == b"" and count == 1
    assert good == [204] * 3 and held_open == [False] * 4
    assert answer is not None and answer.startswith(b"HTTP/1.1 200")


def test_the_notifier_api_site_is_bounded_the_same_way():
    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=str(len(await request.read())))

    async def main():
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_post("/api/v1/silences", echo)
        runner, port, loopback = await start_site(app, "127.0.0.1:0", FAST.model_copy(update={"max_per_client": 2}))
        try:
            slow = await drip(port, "127.0.0.2", "/api/v1/silences", interval_s=0.2)
            idle = [await connect(port, "127.0.0.3") for _ in range(3)]
            third = await closed_by_server(idle[2][0], timeout_s=5)
            first = await closed_by_server(idle[0][0], timeout_s=10)  # the header timeout
            for _, w in idle:
                w.close()
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"http://127.0.0.1:{port}/api/v1/silences", data=b"abc") as r,
            ):
                good = (r.status, await r.text())
            return slow, third, first, good, loopback
        finally:
            await runner.cleanup()

    slow, third, first, good, loopback = asyncio.run(main())
    assert slow is not None and slow.startswith(b"HTTP/1.1 408")
    assert third == b"" and first is not None
    assert good == (200, "3") and loopback
