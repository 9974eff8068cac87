"""The worker's own HTTP endpoint (``streams.web_listen``, loopback port 9096 by default; "" turns it off):

- ``GET /metrics``: the worker's Prometheus metrics (rule coverage, telemetry rejections, rule reloads) and
  the process's (``process_*``, ``python_*``: :mod:`tailhound.endpoints`);
- ``GET /-/healthy``: the process serves (liveness);
- ``GET /-/ready``: 200 once the tables are recovered and the worker processes telemetry, else 503 with
  the reason (readiness; :func:`tailhound.worker.metrics.readiness`);
- ``POST /-/reload``: reload the rule pack now (:mod:`tailhound.streams.reload`); 200 with the version
  when it was swapped in, 422 with every problem when it was rejected (the old rules keep running).

Access: ``/metrics`` and the probes are open (Prometheus and the kubelet send no token); ``POST /-/reload``
is a write and needs the notifier API's bearer token (:class:`tailhound.notifier.api.ApiAccess`). A second
worker on a host sets another port (or 0).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from tailhound.endpoints import OPEN_PATHS, healthy_response, metrics_response, ready_response
from tailhound.logs import log_always
from tailhound.notifier.api import ApiAccess, split_listen, start_site
from tailhound.streams.reload import RuleReloader

log = logging.getLogger(__name__)


def make_app(
    registry: CollectorRegistry, reloader: RuleReloader, access: ApiAccess, ready: Callable[[], tuple[bool, str]]
) -> web.Application:
    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        refused = None if request.path in OPEN_PATHS and request.method == "GET" else access.refusal(request)
        return refused if refused is not None else await handler(request)

    async def metrics(_request: web.Request) -> web.Response:
        return await metrics_response(registry)

    async def healthy(_request: web.Request) -> web.Response:
        return healthy_response("worker")

    async def ready_probe(_request: web.Request) -> web.Response:
        return ready_response("worker", *ready())

    async def reload(_request: web.Request) -> web.Response:
        result = await reloader.reload_async("POST /-/reload")
        body = {
            "ok": result.ok,
            "changed": result.changed,
            "version": result.version,
            "rules": result.rules,
            "problems": list(result.problems),
        }
        return web.json_response(body, status=200 if result.ok else 422)

    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready_probe)
    app.router.add_post("/-/reload", reload)
    return app


async def serve(
    listen: str,
    registry: CollectorRegistry,
    reloader: RuleReloader,
    access: ApiAccess,
    ready: Callable[[], tuple[bool, str]],
) -> tuple[web.AppRunner, int | None]:
    """Start the endpoint on ``host:port``; (the runner, the bound port)."""
    runner, bound, access.loopback = await start_site(
        make_app(registry, reloader, access, ready), listen, registry=registry, prefix="tailhound_worker"
    )
    host = split_listen(listen)[0]
    log_always(
        log,
        f"worker endpoint on {host}:{bound}",
        address=f"{host}:{bound}",
        paths="/metrics /-/healthy /-/ready POST /-/reload",
    )
    return runner, bound
