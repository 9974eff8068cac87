"""Loopback HTTP servers for tests: any aiohttp app on a free port (:func:`serve_app`), and a tiny /metrics server
that serves a fake vLLM whose counters grow (:func:`serve_metrics`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

from tailhound.agents.render import ExpositionWriter


@dataclass
class FakeVllm:
    """vLLM V1-shaped metrics; every scrape advances the counters (like a busy engine)."""

    scrapes: int = 0
    status: int = 200
    tokens: float = 1000.0
    restart_at: int | None = None
    headers_seen: list[dict[str, str]] = field(default_factory=list)

    def body(self) -> str:
        self.scrapes += 1
        if self.restart_at is not None and self.scrapes == self.restart_at:
            self.tokens = 0.0
        self.tokens += 250
        labels = {"engine": "0", "model_name": "llama"}
        w = ExpositionWriter()
        w.gauge("vllm:num_requests_waiting", self.scrapes % 3, labels, help="Requests waiting.")
        w.gauge("vllm:kv_cache_usage_perc", 0.5, labels)
        w.counter("vllm:generation_tokens_total", self.tokens, labels)
        n = self.tokens / 250
        w.histogram("vllm:time_to_first_token_seconds", [0.1, 0.5, 1.0], [n * 0.5, n * 0.9, n], n, n * 0.2, labels)
        return w.text()


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """Serve `app` on a free 127.0.0.1 port; yields its base URL (``http://127.0.0.1:PORT``)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serve_metrics(source: FakeVllm | Callable[[], str], path: str = "/metrics") -> AsyncIterator[str]:
    """Serve `source` on a free loopback port; yields the URL."""

    async def handle(request: web.Request) -> web.Response:
        if isinstance(source, FakeVllm):
            source.headers_seen.append(dict(request.headers))
            if source.status != 200:
                return web.Response(status=source.status, text="unavailable")
            return web.Response(text=source.body(), content_type="text/plain")
        return web.Response(text=source(), content_type="text/plain")

    app = web.Application()
    app.router.add_get(path, handle)
    async with serve_app(app) as base:
        yield base + path
