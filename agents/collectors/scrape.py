"""Scrape any Prometheus text endpoint: vLLM, TGI, NIM, dcgm-exporter, node_exporter, blackbox_exporter.

One target per collector. The record's ``job`` selects the mapping (tailhound/catalog/signals.yaml);
``instance`` (host:port of the URL) is added to the record labels so two servers of one job on one
node stay apart. For blackbox_exporter the record's node is the probed target's host (the ``target``
query parameter), so the client-side view meets the target node's own metrics; a loopback target
(127.0.0.0/8, ::1, localhost) is the agent's own node. ``node:`` overrides both.

The text format 0.0.4 is requested (OpenMetrics is parsed too, when a server insists).
"""

from __future__ import annotations

import os
import time
from urllib.parse import parse_qs, urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from tailhound.agents.collectors import CollectError, local_node, probe_node
from tailhound.agents.collectors.httpbody import read_body
from tailhound.durations import Duration
from tailhound.recording import ScrapeRecord

ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
MAX_BODY_BYTES = 16 << 20


class ScrapeTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job: str = Field(
        pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="Mapping to use: vllm, tgi, nim, sglang, dcgm, node, blackbox (or a new source name).",
    )
    url: str = Field(pattern=r"^https?://", description="The /metrics (or blackbox /probe?target=...) URL.")
    interval_s: Duration = Field(default=5.0, gt=0)
    timeout_s: Duration = Field(default=2.0, gt=0)
    node: str | None = Field(
        default=None,
        description="Node the metrics describe (default: the agent's node; "
        "blackbox: the probed target's host, the agent's "
        "node for a loopback target).",
    )
    labels: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(
        default_factory=dict, description="Header name -> env var holding its value (e.g. a bearer token)."
    )


def target_node(target: ScrapeTarget, default: str) -> str:
    if target.node:
        return target.node
    if target.job == "blackbox":
        probed = parse_qs(urlsplit(target.url).query).get("target", [""])[0]
        return probe_node(urlsplit(probed if "://" in probed else f"//{probed}").hostname, default)
    return default


class ScrapeCollector:
    def __init__(self, target: ScrapeTarget, node: str | None = None) -> None:
        self.target = target
        self.job = target.job
        self.interval_s = target.interval_s
        self.node = target_node(target, node or local_node())
        parts = urlsplit(target.url)
        self.labels = {"instance": parts.netloc, **target.labels}
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT}
        for name, var in self.target.headers_from_env.items():
            value = os.environ.get(var)
            if value is None:
                raise CollectError(f"{self.target.url}: header {name}: environment variable {var} is not set")
            headers[name] = value
        return headers

    async def collect(self) -> list[ScrapeRecord]:
        # aiohttp, not httpx: one scrape costs ~0.14 ms of CPU instead of ~0.7 ms (BENCHMARKS.md)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.target.timeout_s))
        ts = time.time()
        url = self.target.url
        try:
            async with self._session.get(url, headers=self._headers()) as resp:
                if resp.status != 200:
                    raise CollectError(f"{url}: HTTP {resp.status}")
                raw = await read_body(resp, MAX_BODY_BYTES, url, lines=True)
                body = raw.decode(resp.get_encoding() if resp.charset else "utf-8", errors="replace")
        except TimeoutError:
            raise CollectError(f"{url}: timed out after {self.target.timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise CollectError(f"{url}: {type(exc).__name__}: {exc}") from None
        return [
            ScrapeRecord(ts=ts, node=self.node, job=self.job, body=body, labels=self.labels, interval_s=self.interval_s)
        ]

    def failure_records(self, ts: float, reason: str) -> list[ScrapeRecord]:
        return [
            ScrapeRecord(
                ts=ts, node=self.node, job=self.job, labels=self.labels, interval_s=self.interval_s, error=reason
            )
        ]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
