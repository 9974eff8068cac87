"""nginx ``stub_status``: connection states and how close nginx is to its ``worker_connections`` limit.

The page (ngx_http_stub_status_module) is exactly::

    Active connections: 291
    server accepts handled requests
     16630948 16630948 31070465
    Reading: 6 Writing: 179 Waiting: 106

(nginx puts a space before each newline). It is rendered under nginx-prometheus-exporter's names
(``nginx_connections_active`` ..., ``nginx_http_requests_total``, ``nginx_up``) plus
``tailhound_nginx_worker_connections`` and ``tailhound_nginx_connections_utilization_ratio``.

``worker_connections`` in the config is nginx's **total** connection capacity: ``events {
worker_connections N; }`` times ``worker_processes``. nginx counts every connection against it,
upstream connections to the inference servers included, so a reverse proxy runs out at about half
of it in client connections; once it is exhausted new clients time out in the TCP handshake
("worker_connections are not enough" in nginx's error log) instead of seeing a slow response.
``Active connections`` counts client connections only (Waiting = idle keep-alive ones included).
``accepts - handled`` grows only when nginx drops connections at a resource limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import CollectError, local_node, now, probe_node
from tailhound.agents.collectors.httpbody import read_body
from tailhound.agents.render import ExpositionWriter
from tailhound.durations import Duration
from tailhound.recording import ScrapeRecord

JOB = "netprobe"
_ACTIVE = re.compile(r"^Active connections:\s*(\d+)\s*$")
_HEADER = re.compile(r"^server accepts handled requests\s*$")
_TOTALS = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$")
#: stub_status is four short lines; anything much longer is not that page
MAX_PAGE_BYTES = 64 * 1024
_STATES = re.compile(r"^Reading:\s*(\d+)\s+Writing:\s*(\d+)\s+Waiting:\s*(\d+)\s*$")


class NginxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="stub_status URL, e.g. http://127.0.0.1:8080/nginx_status")
    worker_connections: int = Field(gt=0, description="Total capacity: worker_connections x worker_processes.")
    interval_s: Duration = Field(default=5.0, gt=0)
    timeout_s: Duration = Field(default=2.0, gt=0, le=60)
    labels: dict[str, str] = Field(default_factory=dict)
    node: str | None = Field(
        default=None,
        pattern=r"^\S+$",
        description=("Node the page describes (default: the URL's host; a loopback URL: the agent's node)."),
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"expected an http(s) URL with a host, got {url!r}")
        return url


@dataclass(frozen=True)
class StubStatus:
    active: int
    accepts: int
    handled: int
    requests: int
    reading: int
    writing: int
    waiting: int


def parse_stub_status(text: str) -> StubStatus:
    """Parse the four-line stub_status page; ValueError says which line is wrong."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 4:
        raise ValueError(f"expected 4 lines, got {len(lines)}: {text[:120]!r}")
    expected = (
        ("'Active connections: N'", _ACTIVE),
        ("'server accepts handled requests'", _HEADER),
        ("'accepts handled requests' numbers", _TOTALS),
        ("'Reading: N Writing: N Waiting: N'", _STATES),
    )
    groups: list[int] = []
    for line_no, (line, (what, pattern)) in enumerate(zip(lines, expected, strict=True), 1):
        m = pattern.match(line)
        if not m:
            raise ValueError(f"line {line_no}: expected {what}, got {line[:80]!r}")
        groups.extend(int(g) for g in m.groups())
    active, accepts, handled, requests, reading, writing, waiting = groups
    return StubStatus(active, accepts, handled, requests, reading, writing, waiting)


def render_stub_status(status: StubStatus, worker_connections: int) -> str:
    """nginx-prometheus-exporter names plus tailhound's capacity gauges, as exposition text."""
    return write_stub_status(status, worker_connections).text()


def write_stub_status(status: StubStatus, worker_connections: int) -> ExpositionWriter:
    """nginx-prometheus-exporter names plus tailhound's capacity gauges."""
    w = ExpositionWriter()
    w.gauge("nginx_connections_active", status.active, help="Active client connections")
    w.counter("nginx_connections_accepted", status.accepts, help="Accepted client connections")
    w.counter("nginx_connections_handled", status.handled, help="Handled client connections")
    w.gauge("nginx_connections_reading", status.reading, help="Connections where NGINX is reading the request header")
    w.gauge(
        "nginx_connections_writing",
        status.writing,
        help="Connections where NGINX is writing the response back to the client",
    )
    w.gauge("nginx_connections_waiting", status.waiting, help="Idle client connections")
    w.counter("nginx_http_requests_total", status.requests, help="Total http requests")
    w.gauge("nginx_up", 1, help="Status of the last metric scrape")
    w.gauge(
        "tailhound_nginx_worker_connections",
        worker_connections,
        help="Configured connection capacity (worker_connections x worker_processes).",
    )
    w.gauge(
        "tailhound_nginx_connections_utilization_ratio",
        status.active / worker_connections,
        help="Active client connections / configured capacity.",
    )
    return w


class NginxCollector:
    """Scrapes one nginx stub_status page; its node is ``node:``, else the URL's host (the agent's own node
    for a loopback URL: nginx on this machine, next to its procnet and engine signals)."""

    job = JOB

    def __init__(self, config: NginxConfig, node: str | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.node = config.node or probe_node(urlsplit(config.url).hostname, node or local_node())
        self._client: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._client is None:
            # stub_status is an internal page: no proxies from the environment (aiohttp's default).
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))
        return self._client

    def failure_records(self, ts: float, reason: str) -> list[ScrapeRecord]:
        return [
            ScrapeRecord(
                ts=ts,
                node=self.node,
                job=self.job,
                labels=dict(self.config.labels),
                interval_s=self.interval_s,
                error=reason,
            )
        ]

    async def collect(self) -> list[CollectedRecord]:
        url = self.config.url
        try:
            async with self._http().get(url, allow_redirects=False) as response:
                raw = await read_body(response, MAX_PAGE_BYTES, f"nginx stub_status {url}", lines=True)
                text = raw.decode("utf-8", errors="replace")
        except TimeoutError:
            raise CollectError(f"nginx stub_status {url}: timed out after {self.config.timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise CollectError(f"nginx stub_status {url}: {type(exc).__name__}: {exc}") from None
        if response.status != 200:
            raise CollectError(f"nginx stub_status {url}: HTTP {response.status} {response.reason}")
        try:
            status = parse_stub_status(text)
        except ValueError as exc:
            raise CollectError(f"nginx stub_status {url}: malformed page: {exc}") from None
        return [
            CollectedRecord(
                ts=now(),
                node=self.node,
                job=self.job,
                labels=dict(self.config.labels),
                writer=write_stub_status(status, self.config.worker_connections),
                interval_s=self.interval_s,
            )
        ]

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
