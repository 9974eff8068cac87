"""The notifier's HTTP API (Alertmanager-like, JSON): silences and what was notified, and the incident console.

- ``GET  /api/v1/silences`` (``?all=1`` includes expired), ``POST /api/v1/silences``,
  ``DELETE /api/v1/silences/{id}`` (expire), ``GET /api/v1/silences/preview?matcher=...`` (what a silence
  would match);
- ``GET  /api/v1/groups``: notification groups with their incidents, state and delivery logs;
- ``GET  /api/v1/incidents``, ``GET /api/v1/incidents/{id}``: open and recent incidents
  (:mod:`tailhound.notifier.webconsole.routes`);
- ``GET  /console...``: the incident console's pages, unless ``notifier.console`` is off;
- ``GET  /-/healthy`` and ``GET /-/ready`` (ready = this instance is the active notifier);
- ``GET  /metrics``: the notifier's metrics (:mod:`tailhound.notifier.metrics`).

Silences are written to the state topic like `tailhound silence add` does, so any instance accepts
them and the active one applies them within a tick. It listens on ``notifier.api_listen`` (loopback by
default; port 0 takes any free port).

**Access.** Writes (``POST``, ``DELETE``) need ``Authorization: Bearer <token>``, the token from env
``TAILHOUND_NOTIFIER__API_TOKEN`` or the file ``notifier.api_token_file`` (compared in constant time,
never logged). Without a token configured, writes are refused, unless the API listens on loopback only
and ``notifier.allow_unauthenticated_writes`` is set. Reads are open on loopback; on any other address
they need the token too. ``/-/healthy``, ``/-/ready`` and ``/metrics`` are always open (probes and
Prometheus send no token). A browser off loopback signs in at ``/console/login``: the session cookie it gets
lets reads (GET, HEAD) through, never writes (:mod:`tailhound.notifier.webconsole.access`); a refused read of
a console page redirects there. Before any of that, a request naming a host that is not this server's,
a cross-site write and a JSON write of another Content-Type are refused
(:mod:`tailhound.notifier.webconsole.request_checks`).

**Bounds** (:mod:`tailhound.notifier.limits`): a body of at most 64 KiB, JSON without NaN or infinities
and not nested beyond the parser's depth (400, never a 500), at most 1000 active or pending silences
(409), 16 matchers, author and comment of 1 KiB, 30 days. The server (:func:`start_site`, also the worker's
endpoint) is bounded by :class:`tailhound.http_guard.ServerLimits`: headers within 10 s of connecting, a body
within 30 s (408), at most 64 connections from one address.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailhound.durations import Duration
from tailhound.endpoints import OPEN_PATHS, healthy_response, metrics_response, ready_response
from tailhound.errors import InputTooLarge
from tailhound.http_guard import GuardedSite, ServerLimits, body_deadline, export_dropped, runner_options
from tailhound.logs import log_always
from tailhound.settings import NotifierSettings

from .limits import MAX_BODY_BYTES, MAX_SILENCES
from .matchers import MatcherField
from .pipeline import Notifier
from .state import Silence
from .webconsole.access import LOGIN_PATH, ConsoleSessions, add_login_routes, login_redirect
from .webconsole.request_checks import allowed_console_hosts, request_checks
from .webconsole.routes import add_console_routes, add_incident_routes, add_security_headers, silence_listing

log = logging.getLogger(__name__)

TOKEN_ENV = "TAILHOUND_NOTIFIER__API_TOKEN"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class NotifierControl(Protocol):
    """What the API needs of the running notifier (:class:`tailhound.notifier.service.NotifierService`
    provides it); the API does not import the service, the service starts the API."""

    notifier: Notifier
    active: bool
    ingested: int
    api_port: int | None
    clock: Callable[[], float]

    async def write_silence(self, silence: Silence) -> None: ...


class SilenceRequest(BaseModel):
    """``POST /api/v1/silences`` body: matchers, author, comment and either `ends_at` or `duration`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    matchers: list[MatcherField] = Field(min_length=1)
    author: str = Field(min_length=1)
    comment: str = Field(min_length=1)
    starts_at: float | None = None
    ends_at: float | None = None
    duration: Duration | None = None

    @model_validator(mode="after")
    def _one_end(self) -> SilenceRequest:
        if (self.ends_at is None) == (self.duration is None):
            raise ValueError("give exactly one of `ends_at` (unix seconds) or `duration` (e.g. 2h)")
        return self

    def to_silence(self, now: float) -> Silence:
        start = self.starts_at if self.starts_at is not None else now
        end = self.ends_at if self.ends_at is not None else start + (self.duration or 0.0)
        if end <= start:
            raise ValueError("the silence must end after it starts")
        return Silence(
            matchers=self.matchers,
            starts_at=start,
            ends_at=end,
            author=self.author,
            comment=self.comment,
            created_at=now,
        )


# --- access ------------------------------------------------------------------------------------------------------
@dataclass
class ApiAccess:
    """Who may read and write. `token` is the bearer token (None: none configured); `loopback` is whether
    every socket the API listens on is a loopback address (set by :func:`serve` once it is bound)."""

    token: bytes | None = None
    allow_unauthenticated_writes: bool = False
    loopback: bool = True
    #: why the configured token could not be used (writes are then refused, never let through)
    problem: str | None = None
    #: the console's session cookies (reads only), keyed per process
    sessions: ConsoleSessions = field(default_factory=ConsoleSessions)
    #: names a request's Host may carry besides IP addresses and localhost (:mod:`.webconsole.request_checks`)
    allowed_hosts: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never the token
        return (
            f"ApiAccess(token={'***' if self.token else None}, loopback={self.loopback}, "
            f"allow_unauthenticated_writes={self.allow_unauthenticated_writes}, problem={self.problem!r})"
        )

    @classmethod
    def from_settings(cls, settings: NotifierSettings) -> ApiAccess:
        """The token from env (``api_token``) or ``api_token_file``; a file that cannot be read or an empty
        token is a `problem` (logged by the caller without the value): writes stay refused."""
        access = cls._token_access(settings)
        access.allowed_hosts = allowed_console_hosts(settings.console_link_base(), settings.console_allowed_hosts)
        return access

    @classmethod
    def _token_access(cls, settings: NotifierSettings) -> ApiAccess:
        allow = settings.allow_unauthenticated_writes
        if settings.api_token is not None:
            value = settings.api_token.get_secret_value().strip()
            if not value:
                return cls(allow_unauthenticated_writes=allow, problem=f"{TOKEN_ENV} is empty")
            return cls(token=value.encode(), allow_unauthenticated_writes=allow)
        if settings.api_token_file is not None:
            path = settings.api_token_file
            try:
                value = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                why = getattr(exc, "strerror", None) or type(exc).__name__
                return cls(
                    allow_unauthenticated_writes=allow,
                    problem=f"notifier.api_token_file {path}: cannot read it ({why})",
                )
            if not value:
                return cls(allow_unauthenticated_writes=allow, problem=f"notifier.api_token_file {path} is empty")
            return cls(token=value.encode(), allow_unauthenticated_writes=allow)
        return cls(allow_unauthenticated_writes=allow)

    def _bearer_ok(self, request: web.Request) -> bool:
        assert self.token is not None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        # compare_digest on bytes of any length: constant time in the token's content
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token)

    def refusal(self, request: web.Request) -> web.Response | None:
        """None when `request` may go on, else the 401/403 answer."""
        if request.path in OPEN_PATHS or request.path == LOGIN_PATH:  # the login checks the token itself
            return None
        write = request.method not in _READ_METHODS
        if not write and self.loopback:
            return None
        if self.token is not None:
            if self._bearer_ok(request) or self.sessions.allows(request, self.token):
                return None
            return web.json_response(
                {"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="tailhound"'},
            )
        if write and self.loopback and self.allow_unauthenticated_writes and self.problem is None:
            return None
        if self.problem is not None:
            why = f"the API token is not usable: {self.problem}"
        elif write and self.allow_unauthenticated_writes:
            why = "notifier.allow_unauthenticated_writes applies only while the API listens on loopback"
        else:
            why = f"no API token is configured (set {TOKEN_ENV} or notifier.api_token_file)"
        what = "writes" if write else "reads off loopback"
        return _error(403, f"{what} need a bearer token; {why}")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


class _TooLarge(InputTooLarge):
    """An API request body over MAX_BODY_BYTES."""


async def _json_body(request: web.Request) -> Any:
    """The request's JSON (at most MAX_BODY_BYTES: :class:`_TooLarge` beyond, by its Content-Length before
    anything is read; a chunked body is cut by aiohttp's client_max_size); ValueError when it is not JSON,
    has NaN/Infinity, or is nested too deeply to parse."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise _TooLarge(f"body: {request.content_length} bytes, more than {MAX_BODY_BYTES}")
    raw = await request.read()
    try:
        return json.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        raise ValueError("body: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("body: not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"body: invalid JSON ({exc.msg} at {exc.pos})") from None


def make_app(service: NotifierControl, access: ApiAccess | None = None, *, console: bool = True) -> web.Application:
    """The API's routes; with `console`, the incident console's pages and login too."""
    access = access if access is not None else ApiAccess()

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        refused = access.refusal(request)
        if refused is not None:
            return (login_redirect(request) if console else None) or refused
        return await handler(request)

    async def list_silences(request: web.Request) -> web.Response:
        include_all = request.query.get("all") in ("1", "true")
        return web.json_response(silence_listing(service.notifier, service.clock(), include_all))

    async def add_silence(request: web.Request) -> web.Response:
        now = service.clock()
        try:
            body: Any = await _json_body(request)
            silence = SilenceRequest.model_validate(body).to_silence(now)
        except _TooLarge as exc:
            return _error(413, str(exc))
        except ValidationError as exc:
            err = exc.errors()[0]
            return _error(400, f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}")
        except ValueError as exc:
            return _error(400, str(exc))
        if not service.notifier.accepts_silence(silence, now):
            return _error(409, f"already {MAX_SILENCES} active or pending silences (the limit); expire some first")
        await service.write_silence(silence)
        return web.json_response(silence.model_dump(mode="json"), status=201)

    async def expire_silence(request: web.Request) -> web.Response:
        sid = request.match_info["silence_id"]
        s = service.notifier.silences.get(sid)
        if s is None:
            return _error(404, f"no silence {sid[:80]}")
        if s.source != "cli":
            return _error(409, f"{sid} is a maintenance window declared in the notifier config; edit it there")
        if s.expired_at is None:
            s = s.model_copy(update={"expired_at": service.clock()})
            await service.write_silence(s)
        return web.json_response(s.model_dump(mode="json"))

    async def groups(request: web.Request) -> web.Response:
        return web.json_response([g.model_dump(mode="json") for g in service.notifier.groups.values()])

    async def metrics(_request: web.Request) -> web.Response:
        registry = getattr(service, "registry", None)
        if registry is None:
            return _error(404, "no metrics")
        return await metrics_response(registry)  # the worker's registry, or the standalone notifier's

    async def healthy(request: web.Request) -> web.Response:
        return healthy_response("notifier")

    async def ready(request: web.Request) -> web.Response:
        return ready_response("notifier", service.active, "standing by (another notifier is the active one)")

    checks = request_checks(lambda: access.allowed_hosts)  # Host, Origin, Content-Type: before any token
    app = web.Application(middlewares=[checks, guard], client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/api/v1/silences", list_silences)
    app.router.add_post("/api/v1/silences", add_silence)
    app.router.add_delete("/api/v1/silences/{silence_id}", expire_silence)
    app.router.add_get("/api/v1/groups", groups)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    add_incident_routes(app, service)
    if console:
        add_console_routes(app, service)
        add_login_routes(app, lambda: access.token if access.problem is None else None, access.sessions)
    app.on_response_prepare.append(add_security_headers)
    return app


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) -> (host, port); an empty host is 127.0.0.1 (as it always was)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


async def start_site(
    app: web.Application,
    listen: str,
    limits: ServerLimits | None = None,
    *,
    registry: CollectorRegistry | None = None,
    prefix: str = "tailhound_notifier",
) -> tuple[web.AppRunner, int | None, bool]:
    """Serve `app` on ``host:port`` (port 0: any free port) within `limits` (header and body timeouts,
    connections per client): (the runner, the port bound, whether every socket is a loopback address -- what
    is actually bound decides: a name such as localhost may resolve to several addresses). With a `registry`,
    the connections dropped are exported there as ``<prefix>_http_connections_dropped_total{reason}``."""
    limits = limits if limits is not None else ServerLimits()
    host, port = split_listen(listen)
    # after the request checks and the token (a refused request's body is never read: 401 before 413), before
    # every handler: no handler waits on a slow body
    app.middlewares.append(body_deadline(limits))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, **runner_options(limits))
    await runner.setup()
    site = GuardedSite(runner, host, port, limits)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    if registry is not None:
        export_dropped(registry, prefix, site.counter)
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    loopback = bool(sockets) and all(_is_loopback(str(s.getsockname()[0])) for s in sockets)
    return runner, (sockets[0].getsockname()[1] if sockets else None), loopback


async def serve(
    service: NotifierControl, listen: str, access: ApiAccess | None = None, *, console: bool = True
) -> web.AppRunner:
    """Start the API on ``host:port``; returns the runner (``await runner.cleanup()`` stops it). Port 0
    takes a free port: the one bound is ``service.api_port``. `console`: serve the incident console too."""
    access = access if access is not None else ApiAccess()
    runner, service.api_port, access.loopback = await start_site(
        make_app(service, access, console=console), listen, registry=getattr(service, "registry", None)
    )
    address = f"{split_listen(listen)[0]}:{service.api_port}"
    log_always(
        log,
        f"notifier API on {address}",
        address=address,
        paths="/api/v1/silences /metrics /-/healthy /-/ready" + (" / (console)" if console else ""),
    )
    if access.problem is not None:
        log.error("notifier API: writes refused: the API token is not usable: %s", access.problem)
    elif access.token is None and access.allow_unauthenticated_writes and not access.loopback:
        log.error(
            "notifier API: notifier.allow_unauthenticated_writes is ignored: the API listens on %s, not "
            "loopback only; writes are refused until a token is set (%s or notifier.api_token_file)",
            listen,
            TOKEN_ENV,
        )
    elif access.token is None and not access.allow_unauthenticated_writes:
        log.info(
            "notifier API: no token configured (%s or notifier.api_token_file): silences cannot be "
            "created or expired over HTTP",
            TOKEN_ENV,
        )
    return runner
