"""A fake PagerDuty Events API v2 on 127.0.0.1 that validates events the way PagerDuty does.

It answers 202 ``{"status":"success","message":"Event processed","dedup_key":...}`` for a valid event
and 400 ``{"status":"invalid event","message":"Event object is invalid","errors":[...]}`` otherwise,
keeps one alert per dedup_key (triggered/resolved, how many events it got) and can be told to fail
the next requests (``script``): a status with an optional ``Retry-After``, or a delay past the
client's timeout.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

SEVERITIES = {"critical", "error", "warning", "info"}
ACTIONS = {"trigger", "acknowledge", "resolve"}
#: The Events API v2 refuses a request body over 512 KB.
MAX_EVENT_BYTES = 512 * 1024


@dataclass
class Fault:
    """What to do instead of processing the next request."""

    status: int = 500
    retry_after: str | None = None
    body: Any = None
    delay_s: float = 0.0  # sleep this long first; status 0 = then process the event normally


@dataclass
class Alert:
    dedup_key: str
    status: str = "triggered"
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakePagerDuty:
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request body that arrived
    accepted: list[dict[str, Any]] = field(default_factory=list)
    alerts: dict[str, Alert] = field(default_factory=dict)
    script: list[Fault] = field(default_factory=list)
    url: str = ""

    def fail_next(self, *faults: Fault) -> None:
        self.script.extend(faults)

    def validate(self, event: Any) -> list[str]:
        """PagerDuty-style error strings for an invalid event; empty when it is valid."""
        if not isinstance(event, dict):
            return ["Event must be a JSON object"]
        errors = []
        key = event.get("routing_key")
        if not isinstance(key, str) or len(key) != 32:
            errors.append("'routing_key' must be 32 characters")
        action = event.get("event_action")
        if action not in ACTIONS:
            errors.append("'event_action' is missing or invalid (trigger, acknowledge, resolve)")
        dedup = event.get("dedup_key")
        if dedup is not None and (not isinstance(dedup, str) or len(dedup) > 255):
            errors.append("'dedup_key' must be a string of at most 255 characters")
        if action in ("acknowledge", "resolve") and not dedup:
            errors.append(f"'dedup_key' is required for {action} events")
        if action == "trigger":
            payload = event.get("payload")
            if not isinstance(payload, dict):
                return [*errors, "'payload' is missing or not an object"]
            summary = payload.get("summary")
            if not isinstance(summary, str) or not summary.strip():
                errors.append("'payload.summary' is missing or blank")
            elif len(summary) > 1024:
                errors.append("'payload.summary' must be at most 1024 characters")
            source = payload.get("source")
            if not isinstance(source, str) or not source.strip():
                errors.append("'payload.source' is missing or blank")
            if payload.get("severity") not in SEVERITIES:
                errors.append("'payload.severity' must be one of critical, error, warning, info")
            ts = payload.get("timestamp")
            if ts is not None:
                try:
                    datetime.fromisoformat(ts)
                except (TypeError, ValueError):
                    errors.append("'payload.timestamp' is not a valid ISO 8601 timestamp")
            if "links" in event and not all(isinstance(x, dict) and x.get("href") for x in event["links"]):
                errors.append("'links' entries need an 'href'")
        return errors

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            event = json.loads(raw)
        except ValueError:
            event = None
        self.requests.append(event if isinstance(event, dict) else {"_raw": raw.decode(errors="replace")})
        if self.script:
            fault = self.script.pop(0)
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            if fault.status:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                body = fault.body if fault.body is not None else {"status": "error", "message": "fault injected"}
                return web.json_response(body, status=fault.status, headers=headers)
        errors = self.validate(event)
        if len(raw) > MAX_EVENT_BYTES:
            errors.append(f"Event object is larger than {MAX_EVENT_BYTES} bytes")
        if errors:
            return web.json_response(
                {"status": "invalid event", "message": "Event object is invalid", "errors": errors}, status=400
            )
        assert isinstance(event, dict)
        key = event.get("dedup_key") or uuid.uuid4().hex
        alert = self.alerts.get(key)
        if event["event_action"] == "trigger":
            if alert is None or alert.status == "resolved":
                alert = self.alerts[key] = Alert(key)
        elif alert is not None:
            alert.status = "resolved" if event["event_action"] == "resolve" else "acknowledged"
        if alert is not None:
            alert.events.append(event)
        self.accepted.append(event)
        return web.json_response({"status": "success", "message": "Event processed", "dedup_key": key}, status=202)


@asynccontextmanager
async def serve_pagerduty() -> AsyncIterator[FakePagerDuty]:
    """A :class:`FakePagerDuty` on a free loopback port; its ``url`` is the enqueue endpoint."""
    fake = FakePagerDuty()
    app = web.Application(client_max_size=8 * MAX_EVENT_BYTES)  # the size check is PagerDuty's own
    app.router.add_post("/v2/enqueue", fake.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}/v2/enqueue"
    try:
        yield fake
    finally:
        await runner.cleanup()
