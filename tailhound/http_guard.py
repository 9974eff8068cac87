"""Bounds for the project's HTTP servers (the ingest, the notifier API and console, the worker endpoint), so
a few slow or idle clients cannot hold every slot of a server:

- **headers**: a connection that has not sent a whole request line and headers within ``header_timeout_s``
  (of connecting, or of its last answer) is closed: aiohttp's keep-alive timer, armed at connect, does it;
- **body**: a body that has not arrived whole within ``body_timeout_s`` is answered 408
  (:func:`read_body_within`, and :func:`body_deadline` for handlers that read the body themselves);
- **connections**: more than ``max_per_client`` open connections from one address, or ``max_connections``
  in all, are closed as they arrive, before aiohttp sees them (:class:`GuardedSite`).

Every connection dropped for one of these is counted by reason (``header_timeout``, ``body_timeout``,
``per_client_limit``, ``total_limit``) and exported as ``<prefix>_http_connections_dropped_total{reason}``
(:class:`DroppedConnections`). An idle keep-alive connection closed after a whole answer is not a drop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field

from tailhound.durations import Duration

log = logging.getLogger("tailhound.http")


class ServerLimits(BaseModel):
    """How long a client may take and how many connections it may hold (``http:`` in ingest.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    header_timeout_s: Duration = Field(
        default=10.0,
        gt=0,
        le=3600,
        description=(
            "A connection that sent no whole request line and headers this long after connecting (or after its "
            "last answer) is closed."
        ),
    )
    body_timeout_s: Duration = Field(
        default=30.0, gt=0, le=3600, description=("A request body not received whole within this is answered 408.")
    )
    max_per_client: int = Field(
        default=64, ge=1, le=100_000, description=("Open connections from one address; more are closed as they arrive.")
    )
    max_connections: int = Field(
        default=1024, ge=1, le=1_000_000, description=("Open connections in all; more are closed as they arrive.")
    )


class BodyTimeout(Exception):
    """The request body did not arrive within the body timeout."""


#: why a connection was dropped: the label values of ``*_http_connections_dropped_total``
DROP_REASONS = ("header_timeout", "body_timeout", "per_client_limit", "total_limit")


class ConnectionCounter:
    """Open connections per client address; refuses past the limits, counts refusals and other drops."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.open: Counter[str] = Counter()
        self.refused = 0
        self.dropped: Counter[str] = Counter({reason: 0 for reason in DROP_REASONS})
        self._last_warning = 0.0

    def admit(self, peer: str) -> bool:
        over_client = self.open[peer] >= self.limits.max_per_client
        if over_client or sum(self.open.values()) >= self.limits.max_connections:
            self.refused += 1
            self.dropped["per_client_limit" if over_client else "total_limit"] += 1
            if time.monotonic() - self._last_warning > 60:  # one line a minute, however many are refused
                self._last_warning = time.monotonic()
                log.warning(
                    "HTTP connection from %s refused: %d open from it (limit %d), %d in all (limit %d); "
                    "%d refused so far",
                    peer,
                    self.open[peer],
                    self.limits.max_per_client,
                    sum(self.open.values()),
                    self.limits.max_connections,
                    self.refused,
                )
            return False
        self.open[peer] += 1
        return True

    def release(self, peer: str) -> None:
        self.open[peer] -= 1
        if self.open[peer] <= 0:
            del self.open[peer]


def count_drop(request: web.Request, reason: str) -> None:
    """Count a connection of `request` dropped for `reason` on its site's counter (none: not a guarded site)."""
    counter = getattr(request.protocol, "_counter", None)
    if isinstance(counter, ConnectionCounter):
        counter.dropped[reason] += 1


class DroppedConnections(Collector):
    """``<prefix>_http_connections_dropped_total{reason}`` of the guarded sites `counters()` returns (a site
    not started yet is simply absent; every reason is exported, zero included)."""

    def __init__(self, prefix: str, counters: Callable[[], list[ConnectionCounter]]) -> None:
        self.prefix = prefix
        self.counters = counters

    def collect(self):  # prometheus_client's collector protocol
        family = CounterMetricFamily(
            f"{self.prefix}_http_connections_dropped",
            "HTTP connections the server dropped, by reason (header or body timeout, "
            "connection limit per client or in all).",
            labels=["reason"],
        )
        totals = Counter({reason: 0 for reason in DROP_REASONS})
        for counter in self.counters():
            totals.update(counter.dropped)
        for reason in DROP_REASONS:
            family.add_metric([reason], totals[reason])
        yield family


_EXPORTED: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, list[ConnectionCounter]]] = (
    weakref.WeakKeyDictionary()
)


def export_dropped(registry: CollectorRegistry, prefix: str, counter: ConnectionCounter | None = None) -> None:
    """Add `counter`'s drops to ``<prefix>_http_connections_dropped_total`` in `registry` (one collector per
    prefix and registry: a site started again adds to the same counter; no `counter`: the family, at zero)."""
    by_prefix = _EXPORTED.setdefault(registry, {})
    if prefix not in by_prefix:
        counters: list[ConnectionCounter] = []
        by_prefix[prefix] = counters
        registry.register(DroppedConnections(prefix, lambda: list(counters)))
    if counter is not None:
        by_prefix[prefix].append(counter)


class _GuardedHandler(RequestHandler):
    """aiohttp's connection handler, counted per client: a refused connection is aborted at once; one closed
    by the header timer while a request is incomplete (or none came) is counted a ``header_timeout`` drop."""

    def __init__(self, manager: web.Server, *, counter: ConnectionCounter, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._counter = counter
        self._peer: str | None = None
        self._served = 0  # requests whose handling finished on this connection
        self._unanswered = 0  # bytes received since the last request was handled

    def data_received(self, data: bytes) -> None:
        self._unanswered += len(data)
        super().data_received(data)

    async def _handle_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._handle_request(*args, **kwargs)
        finally:
            self._served += 1
            self._unanswered = 0

    def _process_keepalive(self) -> None:
        closing = self._force_close
        super()._process_keepalive()
        # an idle keep-alive connection after a whole answer is an ordinary close, not a drop
        if not closing and self._force_close and (self._served == 0 or self._unanswered > 0):
            self._counter.dropped["header_timeout"] += 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._counter.admit(host):
            transport.abort()  # type: ignore[attr-defined]
            return
        self._peer = host
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._peer is None:  # refused: aiohttp never knew it
            return
        self._counter.release(self._peer)
        self._peer = None
        super().connection_lost(exc)


class GuardedSite(web.TCPSite):
    """A TCP site whose connections go through a :class:`ConnectionCounter`."""

    def __init__(
        self, runner: web.BaseRunner, host: str | None, port: int, limits: ServerLimits, **kwargs: Any
    ) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.counter = ConnectionCounter(limits)

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        options = dict(server._kwargs)  # what AppRunner passes to every handler (keep-alive, access log, ...)

        def handler() -> RequestHandler:
            return _GuardedHandler(server, loop=loop, counter=self.counter, **options)

        self._server = await loop.create_server(
            handler,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def runner_options(limits: ServerLimits) -> dict[str, Any]:
    """The AppRunner keywords that bound waiting for headers (the keep-alive timer runs from the connect) and
    for the rest of a body the handler did not read (aiohttp's lingering, 10 s by default)."""
    return {"keepalive_timeout": limits.header_timeout_s, "lingering_time": min(2.0, limits.body_timeout_s)}


async def read_body_within(
    request: web.Request, limit: int, timeout_s: float, too_large: Callable[[], Exception]
) -> bytes:
    """The request body, at most `limit` bytes (`too_large()` raised beyond) and within `timeout_s`
    (:class:`BodyTimeout` after)."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large()
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await request.content.read(256 * 1024)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > limit:
                    raise too_large()
                chunks.append(chunk)
    except TimeoutError as exc:
        count_drop(request, "body_timeout")
        raise BodyTimeout from exc


def body_deadline(limits: ServerLimits) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware that reads a request's body (up to the app's ``client_max_size``) within the body timeout
    before the handler runs: 408 when it is slower; the handler then reads it from memory."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.can_read_body:
            try:
                async with asyncio.timeout(limits.body_timeout_s):
                    await request.read()
            except TimeoutError:
                count_drop(request, "body_timeout")
                return web.Response(
                    status=408,
                    text=f"request body not received within {limits.body_timeout_s:g} s\n",
                    headers={"Connection": "close"},
                )
        return await handler(request)

    return middleware
