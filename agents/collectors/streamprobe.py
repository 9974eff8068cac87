"""Streaming probe: client-side TTFT/TPOT through the public path, buffered-stream detection, /health P95.

Each collection sends one small streamed chat completion to an OpenAI-compatible endpoint the way a user
reaches it (through the load balancer / CDN) and times every SSE event as it arrives. A proxy that
buffers the stream (nginx ``proxy_buffering on``, a CDN "response buffering" option) shows up as all
tokens arriving in one or two bursts, with TTFT ~= the whole duration. In parallel it times a few
``GET /health`` calls and keeps their P95 over a rolling window, so the load balancer's health-check
timeout can be compared with it (the playbook wants the timeout >= 1.5 x P95, or instances flap).

A failed probe is an observation, not an error: it is counted by outcome. ``collect()`` raises
:class:`CollectError` only when nothing answered at all. Header values (tokens) come from environment
variables and are never logged or rendered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import CollectError, local_node, now, probe_node
from tailhound.agents.collectors.httpbody import read_body
from tailhound.agents.collectors.sse import (
    SSEParser,
    SSEProtocolError,
    analyse_stream,
    delta_content,
)
from tailhound.agents.collectors.streamprobe_metrics import (
    MIN_HEALTH_SAMPLES,
    HealthCheck,
    ProbeMetrics,
    StreamResult,
    buffering_header_gauges,
)
from tailhound.durations import Duration
from tailhound.recording import ScrapeRecord

log = logging.getLogger(__name__)

#: The probe asks for a few dozen tokens; a longer body is not what it asked for.
MAX_STREAM_BYTES = 1 << 20
#: A /health answer is a few bytes; it is read whole (its time counts) but never kept.
MAX_HEALTH_BYTES = 64 * 1024
_RESERVED_LABELS = frozenset({"endpoint", "model", "outcome", "le"})
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StreamProbeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(description="Base URL reached through the public path, e.g. https://llm.example.com")
    name: str = Field(min_length=1, description="Endpoint name, the `endpoint` label.")
    model: str = Field(min_length=1)
    prompt: str = "Count from 1 to 20, one number per line."
    max_tokens: int = Field(default=32, ge=1, le=4096)
    interval_s: Duration = Field(default=30.0, gt=0)
    timeout_s: Duration = Field(default=30.0, gt=0, description="Limit for the whole streamed request.")
    headers_from_env: dict[str, str] = Field(default_factory=dict, description="Header name -> env var name.")
    health_path: str | None = "/health"
    health_samples: int = Field(default=5, ge=1, le=100, description="/health calls per collection.")
    health_window: int = Field(default=100, ge=MIN_HEALTH_SAMPLES, description="Rolling window of the P95.")
    health_timeout_s: Duration | None = Field(default=None, gt=0, description="Per /health call; default timeout_s.")
    lb_health_timeout_s: Duration | None = Field(default=None, gt=0, description="The load balancer's check timeout.")
    burst_gap_s: Duration = Field(default=0.005, gt=0, description="A longer gap between events starts a new burst.")
    labels: dict[str, str] = Field(default_factory=dict)
    node: str | None = Field(
        default=None,
        pattern=r"^\S+$",
        description=("Node the probe describes (default: the endpoint's host; a loopback endpoint: the agent's node)."),
    )

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be an http(s) URL with a host, not {v!r}")
        if parts.username or parts.password:
            raise ValueError("endpoint must not carry credentials; use headers_from_env")
        if parts.query or parts.fragment:
            raise ValueError("endpoint must be a base URL without query or fragment")
        return v.rstrip("/")

    @field_validator("health_path")
    @classmethod
    def _check_health_path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"health_path must start with '/', not {v!r}")
        return v

    @field_validator("headers_from_env")
    @classmethod
    def _check_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for header, env in v.items():
            if not _HEADER_NAME.match(header) or not _ENV_NAME.match(env):
                raise ValueError(f"bad header/env variable name pair {header!r} -> {env!r}")
        return v

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _LABEL_NAME.match(key) or key in _RESERVED_LABELS:
                raise ValueError(f"label {key!r} is not a label name or is set by the probe")
        return v


class StreamProbeCollector:
    """Probes one endpoint's streaming path and /health; one record a collection."""

    job = "streamprobe"

    def __init__(self, config: StreamProbeConfig, node: str | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.node = config.node or probe_node(urlsplit(config.endpoint).hostname, node or local_node())
        self._client: aiohttp.ClientSession | None = None
        self.metrics = ProbeMetrics(config.name, config.model, config.health_window, config.lb_health_timeout_s)
        self._missing_env_warned: set[str] = set()

    # -- I/O --------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        # aiohttp, not httpx: a request costs ~5x less CPU, which matters at 1 Hz (BENCHMARKS.md)
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))
        return self._client

    def _request_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for header, env in self.config.headers_from_env.items():
            value = os.environ.get(env)
            if value:
                headers[header] = value
            elif env not in self._missing_env_warned:
                self._missing_env_warned.add(env)
                log.warning(
                    "streamprobe %s: env variable %s for header %s is not set; sending without it",
                    self.config.name,
                    env,
                    header,
                )
        return headers

    async def collect(self) -> list[CollectedRecord]:
        ts = now()
        headers = self._request_headers()
        stream, checks = await asyncio.gather(self._probe_stream(headers), self._check_health(headers))
        self.metrics.account(stream, checks)
        if stream.outcome == "connect_error" and all(c.connect_failed for c in checks):
            raise CollectError(f"streamprobe {self.config.name}: cannot connect to {self.config.endpoint}")
        labels = {"endpoint": self.config.name, **self.config.labels}
        return [
            CollectedRecord(
                ts=ts,
                node=self.node,
                job=self.job,
                writer=self.metrics.write(stream),
                labels=labels,
                interval_s=self.interval_s,
            )
        ]

    def failure_records(self, ts: float, reason: str) -> list[ScrapeRecord]:
        labels = {"endpoint": self.config.name, **self.config.labels}
        return [
            ScrapeRecord(ts=ts, node=self.node, job=self.job, labels=labels, interval_s=self.interval_s, error=reason)
        ]

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _probe_stream(self, headers: dict[str, str]) -> StreamResult:
        cfg = self.config
        body = {
            "model": cfg.model,
            "messages": [{"role": "user", "content": cfg.prompt}],
            "max_tokens": cfg.max_tokens,
            "stream": True,
        }
        result = StreamResult("protocol_error")
        arrivals: list[float] = []
        last_event: float | None = None
        start = time.perf_counter()
        try:
            async with (
                asyncio.timeout(cfg.timeout_s),
                self._http().post(
                    f"{cfg.endpoint}/v1/chat/completions",
                    json=body,
                    allow_redirects=False,
                    headers={**headers, "Accept": "text/event-stream"},
                ) as resp,
            ):
                result.header_gauges = buffering_header_gauges(resp.headers)
                if not 200 <= resp.status < 300:
                    result.outcome = "http_error"
                    return result
                parser, received, done = SSEParser(), 0, False
                async for chunk in resp.content.iter_any():
                    arrived = time.perf_counter()
                    received += len(chunk)
                    if received > MAX_STREAM_BYTES:
                        raise SSEProtocolError(f"the stream exceeds {MAX_STREAM_BYTES} bytes")
                    for event in parser.feed(chunk):
                        last_event = arrived
                        if event.is_done:
                            done = True
                            break
                        if delta_content(event):
                            arrivals.append(arrived)
                    if done:
                        break
                if not done:
                    done = any(e.is_done for e in parser.finish())
                result.outcome = "ok" if done and arrivals else "protocol_error"
        except TimeoutError:
            result.outcome = "timeout"
        except aiohttp.ClientConnectorError:
            result.outcome = "connect_error"
        except (aiohttp.ClientError, SSEProtocolError) as exc:
            log.debug("streamprobe %s: stream failed: %s", cfg.name, type(exc).__name__)
            result.outcome = "protocol_error"
        if arrivals:
            result.timing = analyse_stream(arrivals, start, cfg.burst_gap_s, end=last_event)
        return result

    async def _check_health(self, headers: dict[str, str]) -> list[HealthCheck]:
        cfg = self.config
        if cfg.health_path is None:
            return []
        url, limit = f"{cfg.endpoint}{cfg.health_path}", cfg.health_timeout_s or cfg.timeout_s
        checks: list[HealthCheck] = []
        for _ in range(cfg.health_samples):
            start = time.perf_counter()
            try:
                async with (
                    asyncio.timeout(limit),
                    self._http().get(url, headers=headers, allow_redirects=False) as resp,
                ):
                    await read_body(resp, MAX_HEALTH_BYTES, url)
                latency = time.perf_counter() - start
                ok = 200 <= resp.status < 300
                checks.append(HealthCheck("ok", latency) if ok else HealthCheck("error"))
            except TimeoutError:
                checks.append(HealthCheck("timeout"))
                break  # a hanging /health would only repeat the same timeout; keep the collection bounded
            except aiohttp.ClientConnectorError:
                checks.append(HealthCheck("error", connect_failed=True))
            except (aiohttp.ClientError, CollectError):  # CollectError: an oversized or cut /health answer
                checks.append(HealthCheck("error"))
        return checks

    # -- state and rendering ----------------------------------------------------------------------
