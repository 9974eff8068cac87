"""Small OpenAI-compatible test servers on 127.0.0.1 (aiohttp, in the test's event loop).

``serve(ServerSpec(...))`` starts one on a free port and yields a :class:`RunningServer` with its base
URL and what it received. The completions route streams SSE token by token (``mode="stream"``), sends
the same events in one write at the end like a buffering proxy (``"buffered"``), answers 500
(``"error500"``) or sends a broken stream (``"garbage"``). ``/health`` answers after a delay, with a
configurable status, or hangs until the server stops.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

Mode = Literal["stream", "buffered", "error500", "garbage"]


@dataclass(frozen=True)
class ServerSpec:
    mode: Mode = "stream"
    tokens: int = 12
    first_token_delay_s: float = 0.1
    token_gap_s: float = 0.02
    health_delay_s: float = 0.0
    health_status: int = 200
    health_hangs: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RunningServer:
    url: str
    spec: ServerSpec
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path, headers)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)


def chat_chunk(delta: dict, finish_reason: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def sse_events(tokens: int) -> list[bytes]:
    """Role chunk, `tokens` content chunks, final chunk, [DONE] (the shape vLLM and OpenAI send)."""
    events = [chat_chunk({"role": "assistant", "content": ""})]
    events += [chat_chunk({"content": f"{i}\n"}) for i in range(1, tokens + 1)]
    events.append(chat_chunk({}, finish_reason="length"))
    events.append(b"data: [DONE]\n\n")
    return events


def _app(server: RunningServer) -> web.Application:
    spec = server.spec

    async def completions(request: web.Request) -> web.StreamResponse:
        server.requests.append((request.path, dict(request.headers)))
        await request.read()
        if spec.mode == "error500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        events = sse_events(spec.tokens)
        base_headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **spec.headers}
        if spec.mode == "buffered":  # a proxy with proxy_buffering on: everything in one write at the end
            await asyncio.sleep(spec.first_token_delay_s + spec.token_gap_s * (spec.tokens - 1))
            return web.Response(body=b"".join(events), headers=base_headers)
        resp = web.StreamResponse(headers=base_headers)
        await resp.prepare(request)
        if spec.mode == "garbage":
            await resp.write(b"data: this is not json\n\n")
            await resp.write_eof()
            return resp
        await resp.write(events[0])
        await asyncio.sleep(spec.first_token_delay_s)
        for i, event in enumerate(events[1:-2]):
            if i:
                await asyncio.sleep(spec.token_gap_s)
            await resp.write(b": keepalive\n\n" + event if i == 3 else event)
        await resp.write(events[-2] + events[-1])
        await resp.write_eof()
        return resp

    async def health(request: web.Request) -> web.Response:
        server.requests.append((request.path, dict(request.headers)))
        if spec.health_hangs:
            await asyncio.wait_for(server.stopping.wait(), timeout=10.0)
        elif spec.health_delay_s:
            await asyncio.sleep(spec.health_delay_s)
        return web.json_response({"status": "ok" if spec.health_status < 300 else "down"}, status=spec.health_status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/health", health)
    return app


@asynccontextmanager
async def serve(spec: ServerSpec | None = None) -> AsyncIterator[RunningServer]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = RunningServer(url=f"http://127.0.0.1:{port}", spec=spec or ServerSpec())
    runner = web.AppRunner(_app(server), handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield server
    finally:
        server.stopping.set()
        await runner.cleanup()
        sock.close()


def closed_port_url() -> str:
    """A 127.0.0.1 URL nothing listens on (the port was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
