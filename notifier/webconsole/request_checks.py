"""Checks on where a request to the notifier's API comes from, before access control looks at tokens.

- **Host** (DNS rebinding): a page on ``evil.example`` whose name is made to resolve to 127.0.0.1 can read a
  loopback console, and the browser sends ``Host: evil.example``. A request is served only when its
  ``Host`` is an IP address (rebinding needs a name), ``localhost`` (or ``*.localhost``), the host of
  ``notifier.console_url``, or on ``notifier.console_allowed_hosts`` (``host``, ``*.suffix``, or ``*``
  for any); else 403.
- **Origin** (CSRF) on writes (POST, DELETE, the login): a browser's ``Origin`` must be this server's own
  (scheme-less ``host:port`` equal to ``Host``) and ``Sec-Fetch-Site``, when sent, ``same-origin`` or
  ``none``; else 403. A client that sends neither (curl, the CLI) is not a browser a site can steer.
- **Content-Type** on JSON writes: ``application/json``, which a cross-site form or a "simple" ``fetch``
  cannot send without a preflight this server never answers; else 415.

Probes and Prometheus (``/-/healthy``, ``/-/ready``, ``/metrics``) are exempt: they name the host as they
are deployed, and they read nothing a console shows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from aiohttp import web

from tailhound.endpoints import OPEN_PATHS

from .access import LOGIN_PATH

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME_SITE = frozenset({"same-origin", "none"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header: no port, no brackets, lower case, no trailing dot."""
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
        return True
    except ValueError:
        return False


def allowed_console_hosts(console_url: str | None, extra: Iterable[str]) -> tuple[str, ...]:
    """The configured names a request's ``Host`` may carry: `console_url`'s host and `extra`."""
    names = [h.strip().lower().rstrip(".") for h in extra if h.strip()]
    if console_url and (host := urlsplit(console_url).hostname):
        names.append(host.lower().rstrip("."))
    return tuple(dict.fromkeys(names))


def host_header_allowed(host_header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request naming `host_header` may be served (see the module doc)."""
    if not host_header:
        return False  # HTTP/1.1 requires one; a rebinding page always sends its own
    host = host_name(host_header)
    if _is_ip(host) or host == "localhost" or host.endswith(".localhost"):
        return True
    return any(name in ("*", host) or (name.startswith("*.") and host.endswith(name[1:])) for name in allowed)


def origin_problem(request: web.Request) -> str | None:
    """Why a write from a browser looks cross-site (None: same origin, or not a browser)."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site.lower() not in _SAME_SITE:
        return f"Sec-Fetch-Site: {site[:40]}"
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    if origin.strip().lower() == "null" or not parts.netloc or parts.netloc.lower() != request.host.lower():
        return f"Origin {origin[:100]!r} is not this server"
    return None


def request_checks(allowed_hosts: Callable[[], Iterable[str]]) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware doing the three checks; `allowed_hosts` gives the configured names."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        if not host_header_allowed(request.headers.get("Host"), allowed_hosts()):
            return web.json_response(
                {
                    "error": f"Host {host_name(request.headers.get('Host', ''))[:100]!r} is not "
                    "this server's (add it to notifier.console_allowed_hosts)"
                },
                status=403,
            )
        if request.method in _READ_METHODS:
            return await handler(request)
        if (why := origin_problem(request)) is not None:
            return web.json_response({"error": f"cross-site write refused: {why}"}, status=403)
        if request.method == "POST" and request.path != LOGIN_PATH and request.content_type != "application/json":
            return web.json_response({"error": "writes need Content-Type: application/json"}, status=415)
        return await handler(request)

    return check
