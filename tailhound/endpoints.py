"""What every tailhound process's HTTP endpoint answers alike: the probe bodies and the process metrics.

Probes, as Prometheus' own (plain text, one line)::

    GET /-/healthy  200 "tailhound worker is Healthy."
    GET /-/ready    200 "tailhound worker is Ready."   or   503 "tailhound worker is not ready: <why>"

``/metrics`` carries prometheus_client's ``process_*`` (CPU, memory, file descriptors, start time),
``python_info`` and ``python_gc_*`` next to the process's own metrics (:func:`add_process_metrics`).
"""

from __future__ import annotations

import asyncio
import weakref

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

#: what needs no token on any endpoint: Prometheus and the kubelet send none
OPEN_PATHS = frozenset({"/metrics", "/-/healthy", "/-/ready"})

#: registries that carry the process collectors already (a second registration would be a duplicate)
_WITH_PROCESS: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def add_process_metrics(registry: CollectorRegistry) -> CollectorRegistry:
    """Register the process, platform and GC collectors on `registry` once (again: nothing); `registry`."""
    if registry not in _WITH_PROCESS:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        _WITH_PROCESS.add(registry)
    return registry


async def metrics_response(registry: CollectorRegistry) -> web.Response:
    """``/metrics``: `registry` with the process collectors, rendered off the event loop (a large registry
    takes milliseconds)."""
    add_process_metrics(registry)
    body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def healthy_text(process: str) -> str:
    return f"tailhound {process} is Healthy.\n"


def ready_text(process: str, ok: bool, why: str = "") -> str:
    return f"tailhound {process} is Ready.\n" if ok else f"tailhound {process} is not ready: {why or 'starting'}\n"


def healthy_response(process: str) -> web.Response:
    """``/-/healthy``: 200 while the process serves."""
    return web.Response(text=healthy_text(process))


def ready_response(process: str, ok: bool, why: str = "") -> web.Response:
    """``/-/ready``: 200 when `ok`, else 503 with `why`."""
    return web.Response(text=ready_text(process, ok, why), status=200 if ok else 503)
