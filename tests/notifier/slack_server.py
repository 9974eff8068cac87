"""A fake Slack on 127.0.0.1 for receiver tests: the Web API as slack_sdk calls it, plus an incoming webhook.

It speaks ``POST /api/chat.postMessage`` and ``POST /api/chat.update`` (bearer token, form-encoded or
JSON bodies, ``blocks`` parsed from JSON) and answers like Slack does: HTTP 200 with ``{"ok": true, ...}``
or ``{"ok": false, "error": "..."}``. It validates messages with Slack's limits (50 blocks, 150-character
headers, 3000-character section texts, ...) and answers ``invalid_blocks`` when they are broken, so a test
learns whether real Slack would have accepted the message. Every request is recorded with its arrival
time, and :meth:`FakeSlack.fail_next` scripts failures (429 with ``Retry-After``, 5xx, Slack error codes,
slow answers).
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

TOKEN = "xoxb-1111-2222-test-secret-token"
WEBHOOK_PATH = "/services/T0000/B0000/webhooksecretXYZ"
CHANNEL_ID = "C0123"

_BLOCK_TYPES = {"header", "section", "context", "divider", "actions", "image", "rich_text"}


@dataclass
class RecordedRequest:
    """One request as it arrived: `api` is the Web API method (``chat.update``) or ``webhook``."""

    method: str
    path: str
    api: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float  # time.monotonic() on arrival
    content_type: str


@dataclass
class Failure:
    """A scripted answer for one upcoming request (optionally only for one API method)."""

    status: int = 200
    error: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    only: str | None = None
    html: bool = False


@dataclass
class FakeSlack:
    """Slack's state as the tests see it: recorded requests, the messages in each channel, scripted failures."""

    token: str = TOKEN
    channel_id: str = CHANNEL_ID
    channel_names: tuple[str, ...] = ("#alerts", "alerts")
    requests: list[RecordedRequest] = field(default_factory=list)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)  # ts -> message
    failures: list[Failure] = field(default_factory=list)
    base_url: str = ""  # set by serve_slack: http://127.0.0.1:<port>/api/
    webhook_url: str = ""  # set by serve_slack
    _counter: int = 0

    def fail_next(
        self,
        error: str | None = None,
        *,
        times: int = 1,
        status: int | None = None,
        retry_after: float | None = None,
        delay: float = 0.0,
        only: str | None = None,
        html: bool = False,
    ) -> None:
        """Answer the next `times` requests (of method `only`, when given) with this failure.

        ``error`` alone is an ``ok: false`` answer with HTTP 200 (``invalid_auth``); ``status=429`` adds
        ``Retry-After``; ``status=500`` is a server error (``html=True``: a load balancer's HTML page);
        ``delay`` answers normally but that many seconds late.
        """
        code = status if status is not None else 200
        if error is None and code == 429:
            error = "ratelimited"
        if error is None and code >= 500:
            error = "internal_error"
        for _ in range(times):
            self.failures.append(Failure(code, error, retry_after, delay, only, html))

    def calls(self, api: str | None = None) -> list[RecordedRequest]:
        """Recorded requests, optionally only those of one API method (or ``webhook``)."""
        return [r for r in self.requests if api is None or r.api == api]

    def _next_failure(self, api: str) -> Failure | None:
        for i, f in enumerate(self.failures):
            if f.only is None or f.only == api:
                return self.failures.pop(i)
        return None

    def _new_ts(self) -> str:
        self._counter += 1
        return f"1790000000.{self._counter * 100:06d}"

    def _channel(self, name: object) -> str | None:
        if name == self.channel_id or name in self.channel_names:
            return self.channel_id
        return None


def validate_blocks(blocks: object) -> list[str]:
    """Slack's checks on a ``blocks`` array, as ``response_metadata.messages`` lines (empty when valid)."""
    if not isinstance(blocks, list):
        return ["[ERROR] must be an array [json-pointer:/blocks]"]
    problems = []
    if len(blocks) > 50:
        problems.append("[ERROR] no more than 50 items allowed [json-pointer:/blocks]")
    for i, block in enumerate(blocks):
        at = f"/blocks/{i}"
        if not isinstance(block, dict) or block.get("type") not in _BLOCK_TYPES:
            problems.append(f"[ERROR] unsupported type [json-pointer:{at}/type]")
            continue
        kind = block["type"]
        if kind == "header":
            text = block.get("text") or {}
            if text.get("type") != "plain_text":
                problems.append(f"[ERROR] must be plain_text [json-pointer:{at}/text/type]")
            problems += _too_long(text.get("text"), 150, f"{at}/text/text")
        elif kind == "section":
            if not block.get("text") and not block.get("fields"):
                problems.append(f"[ERROR] must provide text or fields [json-pointer:{at}]")
            if block.get("text"):
                problems += _too_long(block["text"].get("text"), 3000, f"{at}/text/text")
            fields = block.get("fields") or []
            if len(fields) > 10:
                problems.append(f"[ERROR] no more than 10 items allowed [json-pointer:{at}/fields]")
            for j, f in enumerate(fields):
                problems += _too_long(f.get("text"), 2000, f"{at}/fields/{j}/text")
        elif kind == "context":
            elements = block.get("elements") or []
            if not elements or len(elements) > 10:
                problems.append(f"[ERROR] must have 1 to 10 elements [json-pointer:{at}/elements]")
            for j, e in enumerate(elements):
                problems += _too_long(e.get("text"), 3000, f"{at}/elements/{j}/text")
    return problems


def _too_long(text: object, limit: int, at: str) -> list[str]:
    if not isinstance(text, str) or not text:
        return [f"[ERROR] must be a non-empty string [json-pointer:{at}]"]
    if len(text) > limit:
        return [f"[ERROR] must be less than {limit + 1} characters [json-pointer:{at}]"]
    return []


async def _read_body(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        raw = await request.json()
        body = dict(raw) if isinstance(raw, dict) else {}
    else:
        body = dict(await request.post())
    if isinstance(body.get("blocks"), str):
        try:
            body["blocks"] = json.loads(body["blocks"])
        except ValueError:
            body["blocks"] = None
    return body


def _slack_error(
    error: str, status: int = 200, messages: list[str] | None = None, retry_after: float | None = None
) -> web.Response:
    payload: dict[str, Any] = {"ok": False, "error": error}
    if messages:
        payload["response_metadata"] = {"messages": messages}
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    return web.json_response(payload, status=status, headers=headers)


def _make_app(fake: FakeSlack) -> web.Application:
    async def api(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = await _read_body(request)
        fake.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                method,
                body,
                dict(request.headers),
                time.monotonic(),
                request.content_type,
            )
        )
        failure = fake._next_failure(method)
        if failure is not None:
            if failure.delay:
                await asyncio.sleep(failure.delay)
            if failure.html:
                return web.Response(
                    status=failure.status, text="<html>502 Bad Gateway</html>", content_type="text/html"
                )
            if failure.error:
                return _slack_error(failure.error, failure.status, retry_after=failure.retry_after)
        auth = request.headers.get("Authorization", "")
        if not auth:
            return _slack_error("not_authed")
        if auth != f"Bearer {fake.token}":
            return _slack_error("invalid_auth")
        if method == "chat.postMessage":
            return _post_message(fake, body)
        if method == "chat.update":
            return _update(fake, body)
        return _slack_error("unknown_method", 404)

    async def webhook(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        fake.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                "webhook",
                body,
                dict(request.headers),
                time.monotonic(),
                request.content_type,
            )
        )
        if request.path != WEBHOOK_PATH:
            return web.Response(status=404, text="no_service")
        failure = fake._next_failure("webhook")
        if failure is not None:
            if failure.delay:
                await asyncio.sleep(failure.delay)
            if failure.status != 200 or failure.error:
                headers = {"Retry-After": f"{failure.retry_after:g}"} if failure.retry_after is not None else None
                return web.Response(
                    status=failure.status if failure.status != 200 else 400,
                    text=failure.error or "error",
                    headers=headers,
                )
        if not body.get("text") and not body.get("blocks"):
            return web.Response(status=400, text="no_text")
        if "blocks" in body and validate_blocks(body["blocks"]):
            return web.Response(status=400, text="invalid_blocks")
        fake.messages[fake._new_ts()] = {"channel": "webhook", **body}
        return web.Response(text="ok", content_type="text/html")

    app = web.Application()
    app.router.add_post("/api/{method}", api)
    app.router.add_post("/services/{tail:.*}", webhook)
    return app


def _check_message(body: dict[str, Any]) -> web.Response | None:
    if not body.get("text") and not body.get("blocks"):
        return _slack_error("no_text")
    if "blocks" in body:
        problems = validate_blocks(body["blocks"])
        if problems:
            return _slack_error("invalid_blocks", messages=problems)
    return None


def _post_message(fake: FakeSlack, body: dict[str, Any]) -> web.Response:
    channel = fake._channel(body.get("channel"))
    if channel is None:
        return _slack_error("channel_not_found")
    problem = _check_message(body)
    if problem is not None:
        return problem
    ts = fake._new_ts()
    message = {
        "channel": channel,
        "ts": ts,
        "text": body.get("text"),
        "blocks": body.get("blocks"),
        "thread_ts": body.get("thread_ts"),
        "replies": [],
    }
    fake.messages[ts] = message
    parent = fake.messages.get(str(body.get("thread_ts")))
    if parent is not None:
        parent["replies"].append(ts)
    return web.json_response(
        {"ok": True, "channel": channel, "ts": ts, "message": {"type": "message", "text": message["text"], "ts": ts}}
    )


def _update(fake: FakeSlack, body: dict[str, Any]) -> web.Response:
    channel = fake._channel(body.get("channel"))
    if channel is None:
        return _slack_error("channel_not_found")
    message = fake.messages.get(str(body.get("ts")))
    if message is None or message["channel"] != channel:
        return _slack_error("message_not_found")
    problem = _check_message(body)
    if problem is not None:
        return problem
    message.update(text=body.get("text"), blocks=body.get("blocks"))
    return web.json_response(
        {
            "ok": True,
            "channel": channel,
            "ts": message["ts"],
            "text": message["text"],
            "message": {"type": "message", "text": message["text"], "ts": message["ts"]},
        }
    )


@asynccontextmanager
async def serve_slack(fake: FakeSlack | None = None) -> AsyncIterator[FakeSlack]:
    """Serve a fake Slack on a free loopback port; yields it with ``base_url`` and ``webhook_url`` set."""
    fake = fake or FakeSlack()
    runner = web.AppRunner(_make_app(fake), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.base_url = f"http://127.0.0.1:{port}/api/"
    fake.webhook_url = f"http://127.0.0.1:{port}{WEBHOOK_PATH}"
    try:
        yield fake
    finally:
        await runner.cleanup()
