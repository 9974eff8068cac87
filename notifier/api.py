"""The notifier's HTTP API (Alertmanager-like, JSON): silences and what was notified.

- ``GET  /api/v1/silences`` (``?all=1`` includes expired), ``POST /api/v1/silences``,
  ``DELETE /api/v1/silences/{id}`` (expire);
- ``GET  /api/v1/groups``: notification groups with their incidents, state and delivery logs;
- ``GET  /-/healthy`` and ``GET /-/ready`` (ready = this instance is the active notifier).

Silences are written to the state topic like `tailhound silence add` does, so any instance accepts
them and the active one applies them within a tick. It listens on ``notifier.api_listen``
(loopback by default; it has no authentication, like Alertmanager's, so expose it only behind one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailhound.durations import Duration

from .matchers import MatcherField
from .pipeline import Notifier
from .state import Silence


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

    model_config = ConfigDict(extra="forbid")

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
        return Silence(matchers=self.matchers, starts_at=start, ends_at=end, author=self.author,
                       comment=self.comment, created_at=now)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def make_app(service: NotifierControl) -> web.Application:
    async def list_silences(request: web.Request) -> web.Response:
        now = service.clock()
        include_all = request.query.get("all") in ("1", "true")
        out = [dict(s.model_dump(mode="json"), state=s.state(now)) for s in service.notifier.silences.values()
               if include_all or s.state(now) != "expired"]
        return web.json_response(sorted(out, key=lambda s: s["starts_at"]))

    async def add_silence(request: web.Request) -> web.Response:
        try:
            body: Any = await request.json()
            silence = SilenceRequest.model_validate(body).to_silence(service.clock())
        except ValidationError as exc:
            err = exc.errors()[0]
            return _error(400, f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}")
        except ValueError as exc:
            return _error(400, str(exc))
        await service.write_silence(silence)
        return web.json_response(silence.model_dump(mode="json"), status=201)

    async def expire_silence(request: web.Request) -> web.Response:
        sid = request.match_info["silence_id"]
        s = service.notifier.silences.get(sid)
        if s is None:
            return _error(404, f"no silence {sid}")
        if s.source != "cli":
            return _error(409, f"{sid} is a maintenance window declared in the notifier config; edit it there")
        if s.expired_at is None:
            s = s.model_copy(update={"expired_at": service.clock()})
            await service.write_silence(s)
        return web.json_response(s.model_dump(mode="json"))

    async def groups(request: web.Request) -> web.Response:
        return web.json_response([g.model_dump(mode="json") for g in service.notifier.groups.values()])

    async def healthy(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(request: web.Request) -> web.Response:
        status = 200 if service.active else 503
        return web.json_response({"active": service.active, "ingested": service.ingested}, status=status)

    app = web.Application()
    app.router.add_get("/api/v1/silences", list_silences)
    app.router.add_post("/api/v1/silences", add_silence)
    app.router.add_delete("/api/v1/silences/{silence_id}", expire_silence)
    app.router.add_get("/api/v1/groups", groups)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    return app


async def serve(service: NotifierControl, listen: str) -> web.AppRunner:
    """Start the API on ``host:port``; returns the runner (``await runner.cleanup()`` stops it)."""
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(make_app(service), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host or "127.0.0.1", int(port))
    await site.start()
    service.api_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner
