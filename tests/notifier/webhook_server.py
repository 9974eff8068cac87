"""A remediation endpoint on 127.0.0.1 that verifies tailhound's webhook signatures.

Every request is recorded with its raw body, headers and the verification outcome (``None`` when the
signature checked out, else the :class:`~tailhound.notifier.signing.SignatureError` text); a bad signature is
answered 401. ``script`` makes the next requests fail (status, ``Retry-After``, body, delay);
``dedup`` answers 409 to an ``Idempotency-Key`` it already processed; ``clock_skew_s`` shifts the
server's clock to test the replay window.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tailhound.notifier.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, SignatureError, verify


@dataclass
class Fault:
    status: int = 500
    retry_after: str | None = None
    body: str = "fault injected"
    delay_s: float = 0.0


@dataclass
class Delivery:
    body: bytes
    headers: dict[str, str]
    error: str | None  # None: the signature verified

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class FakeRemediation:
    secret: str | list[str]
    dedup: bool = True
    clock_skew_s: float = 0.0
    deliveries: list[Delivery] = field(default_factory=list)
    processed: list[str] = field(default_factory=list)  # idempotency keys acted on, in order
    script: list[Fault] = field(default_factory=list)
    url: str = ""

    def fail_next(self, *faults: Fault) -> None:
        self.script.extend(faults)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        try:
            verify(
                self.secret,
                request.headers.get(TIMESTAMP_HEADER),
                request.headers.get(SIGNATURE_HEADER),
                body,
                now=time.time() + self.clock_skew_s,
            )
            error = None
        except SignatureError as exc:
            error = str(exc)
        self.deliveries.append(Delivery(body, headers, error))
        if self.script:
            fault = self.script.pop(0)
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            retry = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return web.Response(status=fault.status, text=fault.body, headers=retry)
        if error is not None:
            return web.json_response({"error": error}, status=401)
        key = request.headers.get(IDEMPOTENCY_HEADER, "")
        if self.dedup and key in self.processed:
            return web.json_response({"duplicate": key}, status=409)
        self.processed.append(key)
        return web.json_response({"accepted": key}, status=200)


@asynccontextmanager
async def serve_webhook(secret: str | list[str], path: str = "/hooks/tailhound") -> AsyncIterator[FakeRemediation]:
    """A :class:`FakeRemediation` on a free loopback port; its ``url`` is the endpoint."""
    fake = FakeRemediation(secret)
    app = web.Application()
    app.router.add_post(path, fake.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}{path}"
    try:
        yield fake
    finally:
        await runner.cleanup()
