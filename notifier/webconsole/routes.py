"""The incident console's routes on the notifier's API (:func:`tailhound.notifier.api.make_app` adds them).

JSON, always on:

- ``GET /api/v1/incidents`` (``?state=open|resolved|all``, ``cause=``, ``severity=``, ``q=`` text in the
  summary, scope or id, ``limit=`` at most MAX_INCIDENTS_LISTED): the incidents of the live groups and of
  the recent ones (``Notifier.recent``), open first, newest first, without chart data: a JSON list, like
  the other list endpoints, with the header ``X-Total-Count`` (how many matched before ``limit``). Each has
  ``incident_id`` and ``root_cause`` (the event's names, as the preview answers them) and the same as
  ``id`` and ``cause``;
- ``GET /api/v1/incidents/{id}``: one incident in full (latest event with its chart series, lifecycle
  marks, notifications with their outcomes, its group); 404 when unknown;
- ``GET /api/v1/silences/preview?matcher=...&matcher=...``: which of those incidents a silence with these
  matchers would match now. A matcher that does not parse, more than MAX_MATCHERS of them, or matchers over
  a silence's bounds are *not* a 400: they are listed in ``errors`` (strings, what ``POST /api/v1/silences``
  would answer) and ``matches`` is empty, so the silences page can show them as the user types. Answers
  ``{"matches": [{incident_id, summary, root_cause, severity, state, group_id}], "total": n, "errors": []}``
  with at most MAX_PREVIEW_MATCHES matches.

HTML (setting ``notifier.console``): ``GET /console`` (the incident list), ``GET /console/incidents/{id}``,
``GET /console/silences`` (``?matcher=`` repeated: the new silence's matchers, prefilled), ``GET /`` (a
redirect to ``/console``), and the login (:mod:`.access`). The pages are rendered by :mod:`.pages` and
:mod:`.silences_page` off the event loop. Every response of the API carries :data:`SECURITY_HEADERS`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
from collections.abc import Callable, Iterator
from dataclasses import asdict
from functools import partial
from itertools import chain
from typing import Any, Protocol

from aiohttp import web
from pydantic import ValidationError

from tailhound.incident import IncidentEvent
from tailhound.notifier.limits import (
    DEFAULT_INCIDENTS_LISTED,
    MAX_CONSOLE_INCIDENTS,
    MAX_INCIDENTS_LISTED,
    MAX_MATCHERS,
    MAX_PREVIEW_MATCHES,
)
from tailhound.notifier.matchers import MAX_TEXT_CHARS, Matcher, incident_labels, matches_all
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.state import GroupState, Silence

from .access import CONSOLE_PATH, LOGIN_STYLE
from .assets import FILTER_SCRIPT, SILENCES_SCRIPT, STYLE
from .view import IncidentView, event_clock_offset, views_from_groups


def script_hash(script: str) -> str:
    """The CSP source allowing exactly the inline ``<script>`` (or ``<style>``) whose text is `script`."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


#: Only the console's own two scripts run: no 'unsafe-inline', so an injected <script> or handler does not.
SCRIPT_SRC = " ".join(script_hash(s) for s in (FILTER_SCRIPT, SILENCES_SCRIPT))
#: Only the console's own style sheets apply (the pages' and the login form's): an injected <style> or style=
#: attribute does not (the charts use SVG presentation attributes).
STYLE_SRC = " ".join(script_hash(s) for s in (STYLE, LOGIN_STYLE))
SECURITY_HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; img-src 'self' data:; style-src {STYLE_SRC}; "
    f"script-src {SCRIPT_SRC}; connect-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
STATES = ("open", "resolved", "all")


class ConsoleSource(Protocol):
    """What the routes read of the running notifier (the service, or a test's stand-in)."""

    notifier: Notifier
    clock: Callable[[], float]


async def add_security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the console's security headers on every answer (a handler's own win)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


# --- what the notifier knows of incidents ---------------------------------------------------------------------
def all_groups(notifier: Notifier) -> list[GroupState]:
    """The live groups, then the recent ones (what the pipeline is done with)."""
    return [*notifier.groups.values(), *notifier.recent.values()]


def _incidents(notifier: Notifier) -> Iterator[tuple[IncidentEvent, GroupState]]:
    """(latest event, its group) of every incident, each once (a live group's copy first)."""
    seen: set[str] = set()
    for grp in chain(notifier.groups.values(), notifier.recent.values()):
        for iid, ev in grp.incidents.items():
            if iid not in seen:
                seen.add(iid)
                yield ev, grp


def _newest_first(item: tuple[IncidentEvent, GroupState]) -> tuple[bool, float, str]:
    ev = item[0]
    is_open = ev.event != "resolved"
    when = ev.opened_at if is_open else (ev.resolved_at if ev.resolved_at is not None else ev.ts)
    return not is_open, -when, ev.incident_id


def incident_summary(ev: IncidentEvent, grp: GroupState) -> dict[str, Any]:
    """One incident as the list answers it (no evidence, no chart data)."""
    return {
        "incident_id": ev.incident_id,
        "id": ev.incident_id,
        "root_cause": str(ev.root_cause),
        "cause": str(ev.root_cause),
        "severity": str(ev.severity),
        "scope": ev.scope.model_dump(mode="json"),
        "where": ev.scope.describe(),
        "summary": ev.summary,
        "opened_at": ev.opened_at,
        "resolved_at": ev.resolved_at,
        "transient": ev.transient,
        "state": "resolved" if ev.event == "resolved" else "open",
        "event": ev.event,
        "sequence": ev.sequence,
        "ts": ev.ts,
        "rule": ev.rule,
        "group_id": grp.group_id,
    }


def find_view(notifier: Notifier, incident_id: str) -> tuple[IncidentView, GroupState, bool] | None:
    """The full view of one incident, its group, and whether that group is live (else a recent one)."""
    gid = notifier.incident_group.get(incident_id)
    grp = notifier.groups.get(gid) if gid else None
    live = grp is not None and incident_id in grp.incidents
    if not live:
        grp = next((g for g in notifier.recent.values() if incident_id in g.incidents), None)
    if grp is None:
        return None
    view = next(v for v in views_from_groups([grp]) if v.incident_id == incident_id)
    return view, grp, live


def incident_json(view: IncidentView, grp: GroupState, live: bool) -> dict[str, Any]:
    return {
        "incident": view.event.model_dump(mode="json"),
        "state": "open" if view.open else "resolved",
        "marks": [asdict(m) for m in view.marks],
        "deliveries": [asdict(d) for d in view.deliveries],
        "group_id": grp.group_id,
        "suppressed": view.suppressed,
        "group": {
            "group_id": grp.group_id,
            "group_key": grp.group_key,
            "labels": grp.labels,
            "status": grp.status,
            "flapping": grp.flapping,
            "incidents": list(grp.incidents),
            "live": live,
        },
    }


def silence_listing(notifier: Notifier, now: float, include_all: bool) -> list[dict[str, Any]]:
    """Silences as ``GET /api/v1/silences`` answers them: with their state, by start time."""
    out = [
        dict(s.model_dump(mode="json"), state=s.state(now))
        for s in notifier.silences.values()
        if include_all or s.state(now) != "expired"
    ]
    return sorted(out, key=lambda s: s["starts_at"])


def preview(notifier: Notifier, texts: list[str], now: float) -> dict[str, Any]:
    """What a silence with the matchers `texts` would match now (see the module's docstring)."""
    errors: list[str] = []
    matchers: list[Matcher] = []
    if not texts:
        errors.append('give at least one matcher (?matcher=name="value")')
    elif len(texts) > MAX_MATCHERS:
        errors.append(f"a silence has at most {MAX_MATCHERS} matchers, not {len(texts)}")
    else:
        for text in texts:
            try:
                matchers.append(Matcher.parse(text))
            except ValueError as exc:
                errors.append(str(exc))
    if not errors:  # the bounds of the matchers together, as a silence checks them
        try:
            Silence(
                matchers=matchers, starts_at=now, ends_at=now + 1, author="preview", comment="preview", created_at=now
            )
        except ValidationError as exc:
            errors.append(str(exc.errors()[0]["msg"]).removeprefix("Value error, "))
    if errors:
        return {"matches": [], "total": 0, "errors": errors}
    hits = sorted(
        (item for item in _incidents(notifier) if matches_all(matchers, incident_labels(item[0]))), key=_newest_first
    )
    matches = [
        {
            "incident_id": ev.incident_id,
            "summary": ev.summary or ev.scope.describe(),
            "root_cause": str(ev.root_cause),
            "severity": str(ev.severity),
            "state": "resolved" if ev.event == "resolved" else "open",
            "group_id": grp.group_id,
        }
        for ev, grp in hits[:MAX_PREVIEW_MATCHES]
    ]
    return {"matches": matches, "total": len(hits), "errors": []}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


# --- JSON ------------------------------------------------------------------------------------------------------
def add_incident_routes(app: web.Application, source: ConsoleSource) -> None:
    """The incidents list and detail, and the silence preview."""

    async def list_incidents(request: web.Request) -> web.Response:
        q = request.query
        state = q.get("state", "all")
        if state not in STATES:
            return _error(400, f"state: one of {', '.join(STATES)}, not {state[:40]!r}")
        try:
            limit = int(q.get("limit", DEFAULT_INCIDENTS_LISTED))
        except ValueError:
            return _error(400, "limit: a whole number")
        if limit < 1:
            return _error(400, "limit: at least 1")
        limit = min(limit, MAX_INCIDENTS_LISTED)
        cause, severity, text = q.get("cause"), q.get("severity"), q.get("q", "").casefold()[:200]
        hits = []
        for ev, grp in _incidents(source.notifier):
            is_open = ev.event != "resolved"
            if (state == "open" and not is_open) or (state == "resolved" and is_open):
                continue
            if (cause and ev.root_cause != cause) or (severity and ev.severity != severity):
                continue
            if text and not any(text in s.casefold() for s in (ev.summary, ev.scope.describe(), ev.incident_id)):
                continue
            hits.append((ev, grp))
        hits.sort(key=_newest_first)
        return web.json_response(
            [incident_summary(ev, grp) for ev, grp in hits[:limit]], headers={"X-Total-Count": str(len(hits))}
        )

    async def show_incident(request: web.Request) -> web.Response:
        iid = request.match_info["incident_id"]
        found = find_view(source.notifier, iid)
        if found is None:
            return _error(404, f"no incident {iid[:80]} (open, or resolved in the recent groups)")
        return web.json_response(incident_json(*found))

    async def preview_silence(request: web.Request) -> web.Response:
        return web.json_response(preview(source.notifier, request.query.getall("matcher", []), source.clock()))

    app.router.add_get("/api/v1/incidents", list_incidents)
    app.router.add_get("/api/v1/incidents/{incident_id}", show_incident)
    app.router.add_get("/api/v1/silences/preview", preview_silence)


# --- HTML ------------------------------------------------------------------------------------------------------
def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, content_type="text/html", charset="utf-8", status=status)


async def _render(render: Callable[..., str], *args: Any, **kw: Any) -> web.Response:
    """Render a page in the default executor (the event loop keeps serving streams and deliveries)."""
    return _html(await asyncio.get_running_loop().run_in_executor(None, partial(render, *args, **kw)))


def add_console_routes(app: web.Application, source: ConsoleSource) -> None:
    """The console's pages (the login is :func:`.access.add_login_routes`)."""

    async def index(_request: web.Request) -> web.Response:
        from . import pages

        groups = list(all_groups(source.notifier))
        views = views_from_groups(groups)[:MAX_CONSOLE_INCIDENTS]
        now = source.clock() - event_clock_offset(groups)  # ages in the fleet's time (a replay, the demo)
        return await _render(pages.index_page, views, now, live=True, base=CONSOLE_PATH)

    async def incident(request: web.Request) -> web.Response:
        from . import pages

        iid = request.match_info["incident_id"]
        found = find_view(source.notifier, iid)
        if found is None:
            return _html(
                f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>not found</title>'
                f"</head><body><p>No incident {html.escape(iid[:80])} (open, or resolved recently). "
                f'<a href="{CONSOLE_PATH}">All incidents</a></p></body></html>',
                status=404,
            )
        now = source.clock() - event_clock_offset(all_groups(source.notifier))
        return await _render(pages.incident_page, found[0], now, live=True, base=CONSOLE_PATH)

    async def silences(request: web.Request) -> web.Response:
        from .silences_page import silences_page

        now = source.clock()
        prefill = [m for m in request.query.getall("matcher", []) if len(m) <= MAX_TEXT_CHARS][:MAX_MATCHERS]
        return await _render(
            silences_page,
            silence_listing(source.notifier, now, include_all=True),
            now,
            base=CONSOLE_PATH,
            api="",
            prefill=prefill,
        )

    async def capacity(_request: web.Request) -> web.Response:
        from .capacity_page import capacity_page

        settings = getattr(source, "settings", None)  # the service has them; a test's stand-in may name the file
        path = settings.streams.capacity_file if settings is not None else getattr(source, "capacity_file", None)
        return await _render(capacity_page, path, source.clock(), base=CONSOLE_PATH)

    async def to_console(_request: web.Request) -> web.Response:
        raise web.HTTPFound(CONSOLE_PATH)

    app.router.add_get("/", to_console)
    app.router.add_get(CONSOLE_PATH, index)
    app.router.add_get(CONSOLE_PATH + "/", to_console)
    app.router.add_get(CONSOLE_PATH + "/incidents/{incident_id}", incident)
    app.router.add_get(CONSOLE_PATH + "/silences", silences)
    app.router.add_get(CONSOLE_PATH + "/capacity", capacity)
