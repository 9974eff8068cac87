"""The ingest service's HTTP server (``listen`` in ingest.yaml, 127.0.0.1:9097 by default):

- ``POST /api/v1/write`` (``path``): Prometheus remote write 1.0; the status is the receiver's
  (:class:`~tailhound.ingest.receiver.RemoteWriteIngest`): 204, 400/413/415 (not resent), 401, and 503 with
  ``Retry-After`` when the publisher is behind or :attr:`IngestServiceConfig.max_concurrent_requests`
  requests are already being decoded;
- ``GET /metrics``: the service's own metrics (:mod:`tailhound.ingest.metrics`);
- ``GET /-/healthy``: the process serves; ``GET /-/ready``: 200 while requests are taken (503 with the reason
  when the publisher is behind, or the service is stopping).

The body is read in chunks and refused (413) as soon as it exceeds the receiver's body limit; a declared
``Content-Length`` over it is refused before anything is read. The server is bounded as
:mod:`tailhound.http_guard` says (``http:`` in ingest.yaml): headers within ``header_timeout_s``, the body
within ``body_timeout_s`` (else 408), at most ``max_per_client`` connections from one address. A request
takes one of the ``max_concurrent_requests`` decoding slots only once its body is read, so slow senders never
hold the slots the others need.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tailhound.endpoints import healthy_response, ready_response
from tailhound.errors import InputTooLarge
from tailhound.http_guard import (
    BodyTimeout,
    GuardedSite,
    ServerLimits,
    export_dropped,
    read_body_within,
    runner_options,
)
from tailhound.ingest.metrics import PREFIX, IngestMetrics
from tailhound.ingest.receiver import IngestResult
from tailhound.logs import log_always

log = logging.getLogger("tailhound.ingest")

#: the request handler: (body, headers) -> the receiver's answer (run off the event loop by the service)
Accept = Callable[[bytes, dict[str, str]], Awaitable[IngestResult]]


class TooLarge(InputTooLarge):
    """A remote-write body over ``max_body_bytes``."""


web_exceptions = (RequestPayloadError, ConnectionResetError)


async def read_body(request: web.Request, limit: int, timeout_s: float = 30.0) -> bytes:
    """The request body, at most `limit` bytes (:class:`TooLarge` beyond), within `timeout_s`
    (:class:`~tailhound.http_guard.BodyTimeout` after)."""
    return await read_body_within(request, limit, timeout_s, TooLarge)


def make_app(path: str, accept: Accept, service: IngestServer) -> web.Application:
    metrics = service.metrics

    async def write(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        status, headers, text = await _write(request)
        metrics.requests.labels(status=str(status)).inc()
        metrics.request_seconds.observe(time.perf_counter() - t0)
        return web.Response(status=status, headers=headers, text=text or None)

    async def _write(request: web.Request) -> tuple[int, dict[str, str], str]:
        if service.stopping:
            return 503, {"Retry-After": "5"}, "stopping\n"
        if service.in_flight >= service.max_in_flight:  # refuse early when busy, before reading a body
            return 503, {"Retry-After": str(service.retry_after_s)}, "busy: too many requests at once\n"
        headers = dict(request.headers)
        try:
            body = await read_body(request, service.max_body_bytes, service.limits.body_timeout_s)
        except TooLarge:
            return 413, {}, f"request body over {service.max_body_bytes} bytes\n"
        except BodyTimeout:
            return (
                408,
                {"Connection": "close"},
                f"request body not received within {service.limits.body_timeout_s:g} s\n",
            )
        except web_exceptions as exc:
            return 400, {}, f"cannot read the request body: {exc}\n"[:300]
        if service.in_flight >= service.max_in_flight:  # the slots are for decoding: taken once the body is here
            return 503, {"Retry-After": str(service.retry_after_s)}, "busy: too many requests at once\n"
        service.in_flight += 1
        try:
            result = await accept(body, headers)
        finally:
            service.in_flight -= 1
        return _answer(result)

    async def metrics_page(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthy(_request: web.Request) -> web.Response:
        return healthy_response("ingest")

    async def ready(_request: web.Request) -> web.Response:
        return ready_response("ingest", *service.readiness())

    app = web.Application(client_max_size=1024)  # the write handler streams its body itself
    app.router.add_post(path, write)
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    return app


def _answer(result: IngestResult) -> tuple[int, dict[str, str], str]:
    return result.status, result.headers, result.message


class IngestServer:
    """What the handlers need to know about the service (counts, limits, readiness)."""

    def __init__(
        self,
        metrics: IngestMetrics,
        *,
        max_body_bytes: int,
        max_in_flight: int,
        retry_after_s: int,
        readiness: Callable[[], tuple[bool, str]],
        limits: ServerLimits | None = None,
    ) -> None:
        self.metrics = metrics
        self.limits = limits if limits is not None else ServerLimits()
        self.site: GuardedSite | None = None
        self.max_body_bytes, self.max_in_flight, self.retry_after_s = max_body_bytes, max_in_flight, retry_after_s
        self.readiness = readiness
        self.in_flight = 0
        self.stopping = False
        self.runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self, app: web.Application, listen: str) -> int:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        # auto_decompress off: the body is read as sent (a gzip one is refused, 415, not inflated by aiohttp)
        self.runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=2.0, auto_decompress=False, **runner_options(self.limits)
        )
        await self.runner.setup()
        site = self.site = GuardedSite(self.runner, host, int(port), self.limits)
        export_dropped(self.metrics.registry, PREFIX, site.counter)  # tailhound_ingest_http_connections_dropped
        try:
            await site.start()
        except BaseException:
            await self.runner.cleanup()
            self.runner = None
            raise
        server = getattr(site, "_server", None)
        sockets = server.sockets if server is not None else []
        self.port = sockets[0].getsockname()[1] if sockets else int(port)
        log_always(
            log,
            f"ingest endpoint on {host}:{self.port}",
            address=f"{host}:{self.port}",
            paths="/metrics /-/healthy /-/ready",
        )
        if not _loopback(host):
            log.info("remote write open on %s: set auth (bearer_token_file) unless the network is private", host)
        return self.port

    async def stop(self) -> None:
        self.stopping = True
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
