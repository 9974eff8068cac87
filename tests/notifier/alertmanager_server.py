"""A real Alertmanager for tests (Debian's ``prometheus-alertmanager``), and a fake one for the unit tests.

:func:`run_alertmanager` starts the binary on loopback with a temporary config: one route to a webhook
receiver that points at a local :class:`WebhookSink` (short group wait and interval, resolved
notifications on), its storage in a temporary folder, clustering off (``--cluster.listen-address=``) and,
optionally, basic auth through ``--web.config.file``. It waits for ``/-/ready`` and stops the process on
exit (no orphans). :class:`Alertmanager` wraps its v2 API: alerts, silences.

:func:`serve_fake_alertmanager` is an aiohttp stand-in that records every ``POST /api/v2/alerts`` with its
headers and can be told to fail the next requests, for outcomes the real one cannot be made to produce.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

#: user and bcrypt hash (cost 4) of BASIC_PASSWORD, for ``--web.config.file``
BASIC_USER = "tailhound"
BASIC_PASSWORD = "am-test-password"
BASIC_HASH = "$2b$04$GyuKaiz.0sydHGNNjq7t5eV//fg6HcxENs6BhSA6SsK39vTesjqG2"


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


# --- where Alertmanager sends its notifications ---------------------------------------------------------------------
@dataclass
class WebhookSink:
    """Records every webhook notification Alertmanager sends (``status``, ``alerts``, ...)."""

    received: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(await request.json())
        return web.Response(text="ok")

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every alert of every notification (optionally only those with `status`), in order."""
        return [a for n in self.received for a in n["alerts"] if status is None or a["status"] == status]

    async def wait_for(self, status: str, incident_id: str, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for alert in self.alerts(status):
                if alert["labels"].get("incident_id") == incident_id:
                    return alert
            await asyncio.sleep(0.1)
        raise AssertionError(f"no {status} notification for {incident_id} in {timeout}s; got {self.received}")


@asynccontextmanager
async def serve_webhook_sink() -> AsyncIterator[WebhookSink]:
    sink = WebhookSink()
    app = web.Application()
    app.router.add_post("/hook", sink.handle)
    runner, base = await _serve(app)
    sink.url = base + "/hook"
    try:
        yield sink
    finally:
        await runner.cleanup()


# --- the real Alertmanager -------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Alertmanager:
    url: str
    process: subprocess.Popen
    log_path: Path
    auth: tuple[str, str] | None = None

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=5.0, auth=self.auth)

    async def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` (active, silenced and inhibited ones; resolved alerts are not listed)."""
        async with self._client() as c:
            r = await c.get("/api/v2/alerts", params=filters)
        r.raise_for_status()
        return r.json()

    async def alert(self, incident_id: str) -> dict[str, Any] | None:
        found = [a for a in await self.alerts() if a["labels"].get("incident_id") == incident_id]
        assert len(found) <= 1, f"{len(found)} alerts for {incident_id}: {found}"
        return found[0] if found else None

    async def silence(self, name: str, value: str, *, minutes: float = 30, comment: str = "test") -> str:
        """``POST /api/v2/silences`` with one equality matcher; the silence id."""
        now = datetime.now(UTC)
        body = {
            "matchers": [{"name": name, "value": value, "isRegex": False, "isEqual": True}],
            "startsAt": _iso(now - timedelta(seconds=1)),
            "endsAt": _iso(now + timedelta(minutes=minutes)),
            "createdBy": "tailhound-tests",
            "comment": comment,
        }
        async with self._client() as c:
            r = await c.post("/api/v2/silences", json=body)
        r.raise_for_status()
        return r.json()["silenceID"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _config(webhook_url: str) -> str:
    return json.dumps(
        {  # JSON is YAML
            "route": {
                "receiver": "sink",
                "group_by": ["incident_id"],
                "group_wait": "100ms",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [{"name": "sink", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
        },
        indent=2,
    )


@asynccontextmanager
async def run_alertmanager(
    binary: str, workdir: Path, webhook_url: str, *, basic_auth: bool = False
) -> AsyncIterator[Alertmanager]:
    """Alertmanager on a free loopback port, ready; stopped (and waited for) on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "alertmanager.yml"
    config.write_text(_config(webhook_url), encoding="utf-8")
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.path={workdir / 'data'}",
        "--cluster.listen-address=",
        "--log.level=debug",
    ]
    auth = None
    if basic_auth:
        web_config = workdir / "web.yml"
        web_config.write_text(f"basic_auth_users:\n  {BASIC_USER}: {BASIC_HASH}\n", encoding="utf-8")
        args.append(f"--web.config.file={web_config}")
        auth = (BASIC_USER, BASIC_PASSWORD)
    log_path = workdir / "alertmanager.log"
    for _attempt in range(3):  # a free port may be taken before the binary binds it: try another
        port = free_port()
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [*args, f"--web.listen-address=127.0.0.1:{port}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        am = Alertmanager(f"http://127.0.0.1:{port}", proc, log_path, auth)
        try:
            if await _ready(am):
                break
        except BaseException:
            _stop(proc)
            raise
        _stop(proc)
    else:
        raise RuntimeError(f"Alertmanager did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
    try:
        yield am
    finally:
        _stop(proc)


async def _ready(am: Alertmanager, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=1.0, auth=am.auth) as c:
        while time.monotonic() < deadline:
            if am.process.poll() is not None:
                return False
            try:
                if (await c.get(am.url + "/-/ready")).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# --- a fake one ------------------------------------------------------------------------------------------------------
@dataclass
class Post:
    alerts: list[dict[str, Any]]
    headers: dict[str, str]


@dataclass
class FakeAlertmanager:
    """Accepts ``POST /api/v2/alerts`` (200) and records it; ``fail_next`` answers the next requests with
    (status, body[, Retry-After]) instead; ``delay_s`` holds each answer that long."""

    posts: list[Post] = field(default_factory=list)
    script: list[tuple[int, Any, str | None]] = field(default_factory=list)
    delay_s: float = 0.0
    url: str = ""

    def fail_next(
        self, status: int, body: Any = "fault injected", retry_after: str | None = None, times: int = 1
    ) -> None:
        self.script.extend([(status, body, retry_after)] * times)

    async def handle(self, request: web.Request) -> web.Response:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.posts.append(Post(await request.json(), dict(request.headers)))
        if self.script:
            status, body, retry_after = self.script.pop(0)
            headers = {"Retry-After": retry_after} if retry_after else {}
            return web.json_response(body, status=status, headers=headers)
        return web.Response(status=200)

    def alerts(self) -> list[dict[str, Any]]:
        return [a for p in self.posts for a in p.alerts]


@asynccontextmanager
async def serve_fake_alertmanager(prefix: str = "") -> AsyncIterator[FakeAlertmanager]:
    fake = FakeAlertmanager()
    app = web.Application()
    app.router.add_post(prefix + "/api/v2/alerts", fake.handle)
    runner, base = await _serve(app)
    fake.url = base + prefix
    try:
        yield fake
    finally:
        await runner.cleanup()
