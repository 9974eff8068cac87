"""A scrape gets the whole body or fails: slow chunks are read to the end, a cut body is a counted failure.

The servers are raw loopback sockets that write the HTTP response by hand, so each test controls exactly
where the bytes stop and when the connection closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from tailhound.agents.collectors import CollectError
from tailhound.agents.collectors.nginx import NginxCollector, NginxConfig
from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget
from tailhound.agents.config import AgentConfig
from tailhound.agents.runtime import Agent
from tailhound.capacity.loadtest import _fetch_text
from tailhound.errors import TailhoundError

#: a node_exporter-like page: every line complete, the last one too
BODY = "".join(
    f"# HELP node_metric_{i} Metric {i}.\n# TYPE node_metric_{i} gauge\nnode_metric_{i} {i}\n" for i in range(400)
).encode()
#: pause between the parts a server writes: long enough that a reader sees each part arrive alone
PAUSE_S = 0.15


def chunked(*parts: bytes) -> list[bytes]:
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in parts]


@asynccontextmanager
async def raw_server(head: bytes, parts: Sequence[bytes], end: bytes = b"") -> AsyncIterator[str]:
    """Answers every request with `head`, then each of `parts` after a pause, then `end`, and closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write(head)
            for part in parts:
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(PAUSE_S)
            writer.write(end)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
    finally:
        server.close()
        await server.wait_closed()


def head(**headers: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", "Content-Type: text/plain; version=0.0.4"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def thirds(body: bytes) -> list[bytes]:
    n = len(body) // 3
    return [body[:n], body[n : 2 * n], body[2 * n :]]


async def scrape(url: str, timeout_s: float = 5.0) -> str:
    c = ScrapeCollector(ScrapeTarget(job="node", url=url, timeout_s=timeout_s), node="gpu-1")
    try:
        [rec] = await c.collect()
        return rec.body
    finally:
        await c.close()


async def test_a_body_sent_in_slow_chunks_is_read_to_its_end():
    async with raw_server(head(Transfer_Encoding="chunked"), chunked(*thirds(BODY)), b"0\r\n\r\n") as url:
        assert await scrape(url) == BODY.decode()


async def test_a_body_with_a_length_sent_in_slow_parts_is_read_to_its_end():
    async with raw_server(head(Content_Length=str(len(BODY))), thirds(BODY)) as url:
        assert await scrape(url) == BODY.decode()


async def test_a_connection_closed_before_content_length_is_a_collect_error():
    async with raw_server(head(Content_Length=str(len(BODY))), thirds(BODY)[:2]) as url:
        with pytest.raises(CollectError, match=r"/metrics: body cut after \d+ bytes"):
            await scrape(url)


async def test_a_chunked_body_cut_before_its_last_chunk_is_a_collect_error():
    async with raw_server(head(Transfer_Encoding="chunked"), chunked(*thirds(BODY)[:2])) as url:
        with pytest.raises(CollectError, match="body cut after"):
            await scrape(url)


async def test_a_body_ended_by_closing_mid_line_is_a_collect_error():
    cut = BODY[: len(BODY) // 2 + 7]
    assert not cut.endswith(b"\n")
    async with raw_server(head(Connection="close"), [cut[:100], cut[100:]]) as url:
        with pytest.raises(CollectError, match="ends mid-line"):
            await scrape(url)
    async with raw_server(head(Connection="close"), [BODY[:100], BODY[100:]]) as url:
        assert await scrape(url) == BODY.decode()  # ended by the close, but on a complete line


async def test_bodies_over_the_limit_are_refused_declared_or_not(monkeypatch):
    from tailhound.agents.collectors import scrape as scrape_module

    monkeypatch.setattr(scrape_module, "MAX_BODY_BYTES", 1000)
    async with raw_server(head(Content_Length=str(len(BODY))), [BODY]) as url:
        with pytest.raises(CollectError, match=f"body of {len(BODY)} bytes is over the 1000 bytes limit"):
            await scrape(url)
    async with raw_server(head(Transfer_Encoding="chunked"), chunked(BODY), b"0\r\n\r\n") as url:
        with pytest.raises(CollectError, match="body is over the 1000 bytes limit"):
            await scrape(url)


async def test_a_cut_body_is_a_counted_failed_collection_never_a_short_snapshot():
    async with raw_server(head(Transfer_Encoding="chunked"), chunked(*thirds(BODY)[:2])) as url:
        collector = ScrapeCollector(ScrapeTarget(job="node", url=url), node="gpu-1")
        snaps: list = []
        agent = Agent(AgentConfig(listen=None), snaps.append, collectors=[collector])
        try:
            assert await agent.collect_once(collector)
        finally:
            await collector.close()
    assert agent.metrics.collect_errors.labels("node")._value.get() == 1
    [snap] = snaps
    assert snap.node == "gpu-1" and snap.samples == [] and "body cut after" in snap.error


async def test_nginx_reads_its_page_whole():
    page = b"Active connections: 3 \nserver accepts handled requests\n 10 10 20 \nReading: 0 Writing: 1 Waiting: 2 \n"
    async with raw_server(head(Transfer_Encoding="chunked"), chunked(page[:30], page[30:]), b"0\r\n\r\n") as url:
        c = NginxCollector(NginxConfig(url=url, worker_connections=100), node="gpu-1")
        try:
            [rec] = await c.collect()
        finally:
            await c.close()
    assert "nginx_connections_waiting 2" in rec.body


async def test_the_load_test_reads_metrics_whole_and_refuses_a_cut_body():
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with raw_server(head(Transfer_Encoding="chunked"), chunked(*thirds(BODY)), b"0\r\n\r\n") as url:
            assert await _fetch_text(session, url, {}) == BODY.decode()
        async with raw_server(head(Content_Length=str(len(BODY))), thirds(BODY)[:1]) as url:
            with pytest.raises(TailhoundError, match="body cut after"):
                await _fetch_text(session, url, {})
