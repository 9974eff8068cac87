"""TCP connect probe: how long the three-way handshake to a service takes, and how often it fails.

Unprivileged (a plain ``connect()``): each collection resolves every target once, then times
``attempts`` connects to the resolved address (the socket is closed as soon as it is open), so the
duration is SYN -> SYN/ACK plus the kernel's accept-queue admission, without DNS. A full accept queue
on the server (``ListenOverflows``) shows up here as timeouts: the server drops the SYN and the client
waits for its retransmission.

Each target gets its own record with ``node = target host`` (its ``node:`` when set; the agent's own node
for a loopback host), so the client-side view of a server meets that server's own metrics
(``node_netstat_TcpExt_ListenOverflows``, nginx ``stub_status``). The record
labels carry ``source`` (the probing host) so probes of one target from several hosts stay apart.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import literal_address, local_node, now, probe_node, unique_names
from tailhound.agents.render import ExpositionWriter
from tailhound.durations import Duration
from tailhound.recording import ScrapeRecord

JOB = "netprobe"
#: Histogram buckets (seconds) from 0.1 ms (same rack) to 2 s (a SYN retransmission or two).
CONNECT_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
#: Why a connect failed, as the ``reason`` label of ``tailhound_tcp_connect_errors_total``.
ERROR_REASONS = ("refused", "timeout", "unreachable", "reset", "dns", "other")
#: At most this many targets are probed at the same time.
MAX_CONCURRENT_TARGETS = 32
#: Label names the probe sets itself; target labels may not use them.
RESERVED_LABELS = frozenset({"target", "source", "address", "reason"})
_UNREACHABLE_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}


class TcpTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    host: str = Field(min_length=1, max_length=200, pattern=r"^\S+$")
    port: int = Field(ge=1, le=65535)
    labels: dict[str, str] = Field(default_factory=dict)
    node: str | None = Field(
        default=None,
        pattern=r"^\S+$",
        description=("Node the probe describes (default: host; a loopback host: the agent's node)."),
    )

    @field_validator("labels")
    @classmethod
    def _no_reserved_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        reserved = sorted(set(labels) & RESERVED_LABELS)
        if reserved:
            raise ValueError(f"labels {reserved} are set by the probe itself")
        return labels


class TcpConnectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    targets: list[TcpTarget] = Field(min_length=1)
    interval_s: Duration = Field(default=5.0, gt=0)
    attempts: int = Field(default=3, ge=1, le=100, description="Connects per target per collection.")
    timeout_s: Duration = Field(default=1.0, gt=0, le=60)

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, targets: list[TcpTarget]) -> list[TcpTarget]:
        return unique_names(targets)


@dataclass(frozen=True)
class ConnectOutcome:
    """One connect attempt: its duration when it succeeded, else why it failed."""

    duration_s: float | None = None
    reason: str | None = None


@dataclass
class ConnectTotals:
    """What one target's probes added up to over the agent's lifetime (the cumulative series)."""

    bucket_counts: list[int] = field(default_factory=lambda: [0] * len(CONNECT_BUCKETS))
    duration_sum: float = 0.0
    successes: int = 0
    attempts: int = 0
    failures: int = 0
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_REASONS, 0))

    def add(self, outcome: ConnectOutcome) -> None:
        self.attempts += 1
        if outcome.duration_s is None:
            self.failures += 1
            reason = outcome.reason if outcome.reason in self.errors else "other"
            self.errors[reason] += 1
            return
        self.successes += 1
        self.duration_sum += outcome.duration_s
        for i, bound in enumerate(CONNECT_BUCKETS):
            if outcome.duration_s <= bound:
                self.bucket_counts[i] += 1


def classify_connect_error(exc: BaseException) -> str:
    """Map a connect exception to one of :data:`ERROR_REASONS`."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, socket.gaierror):
        return "dns"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, ConnectionResetError | ConnectionAbortedError):
        return "reset"
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS:
        return "unreachable"
    if isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT:
        return "timeout"
    return "other"


def render_target(target: TcpTarget, totals: ConnectTotals, round_outcomes: Sequence[ConnectOutcome]) -> str:
    """Exposition text of one target: lifetime counters/histogram plus this round's gauges."""
    return write_target(target, totals, round_outcomes).text()


def write_target(
    target: TcpTarget, totals: ConnectTotals, round_outcomes: Sequence[ConnectOutcome]
) -> ExpositionWriter:
    """One target's families: lifetime counters/histogram plus this round's gauges."""
    labels = {"target": target.name, "address": f"{target.host}:{target.port}"}
    w = ExpositionWriter()
    w.histogram(
        "tailhound_tcp_connect_duration_seconds",
        CONNECT_BUCKETS,
        totals.bucket_counts,
        totals.successes,
        totals.duration_sum,
        labels,
        help="Duration of successful TCP connects (handshake).",
    )
    w.counter("tailhound_tcp_connect_attempts_total", totals.attempts, labels, help="TCP connect attempts.")
    w.counter(
        "tailhound_tcp_connect_failures_total",
        totals.failures,
        labels,
        help="TCP connects that failed (refused, timeout, unreachable, ...).",
    )
    for reason, count in totals.errors.items():
        w.counter(
            "tailhound_tcp_connect_errors_total",
            count,
            {**labels, "reason": reason},
            help="Failed TCP connects by reason.",
        )
    successes = [o.duration_s for o in round_outcomes if o.duration_s is not None]
    if successes:
        w.gauge(
            "tailhound_tcp_connect_last_seconds",
            statistics.median(successes),
            labels,
            help="Median connect duration of this collection's successful attempts.",
        )
    if round_outcomes:
        failed = sum(1 for o in round_outcomes if o.duration_s is None)
        w.gauge(
            "tailhound_tcp_connect_failure_ratio",
            failed / len(round_outcomes),
            labels,
            help="Share of this collection's connect attempts that failed.",
        )
    return w


async def resolve_address(host: str, port: int, timeout_s: float) -> tuple[int, str]:
    """(family, ip) of the first TCP address of host; raises socket.gaierror or TimeoutError."""
    literal = literal_address(host)
    if literal is not None:
        return literal
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"no address for {host}")
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


async def time_connect(ip: str, port: int, timeout_s: float, family: int = socket.AF_INET) -> ConnectOutcome:
    """Time one non-blocking ``connect()`` to ip:port (the handshake) and close the socket at once.

    A plain socket, not ``asyncio.open_connection``: no transport, protocol and stream objects (and
    no task) are built for a connection that is closed right away, and their set-up is not timed."""
    loop = asyncio.get_running_loop()
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return ConnectOutcome(reason=classify_connect_error(exc))
    try:
        sock.setblocking(False)
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                await loop.sock_connect(sock, (ip, port))
        except (OSError, TimeoutError) as exc:
            return ConnectOutcome(reason=classify_connect_error(exc))
        return ConnectOutcome(duration_s=time.perf_counter() - start)
    finally:
        sock.close()


async def probe_target(target: TcpTarget, attempts: int, timeout_s: float) -> list[ConnectOutcome]:
    """Resolve the target once, then connect `attempts` times one after the other."""
    try:
        family, ip = await resolve_address(target.host, target.port, timeout_s)
    except (OSError, TimeoutError) as exc:
        reason = "dns" if isinstance(exc, socket.gaierror | TimeoutError) else classify_connect_error(exc)
        return [ConnectOutcome(reason=reason)] * attempts
    return [await time_connect(ip, target.port, timeout_s, family) for _ in range(attempts)]


class TcpConnectCollector:
    """Times TCP connects to each configured target; one record per target."""

    job = JOB

    def __init__(self, config: TcpConnectConfig, node: str | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.source = node or local_node()
        self._totals: dict[str, ConnectTotals] = {t.name: ConnectTotals() for t in config.targets}
        self._nodes = {t.name: t.node or probe_node(t.host, self.source) for t in config.targets}

    async def _probe(self, target: TcpTarget, limit: asyncio.Semaphore) -> CollectedRecord:
        async with limit:
            outcomes = await probe_target(target, self.config.attempts, self.config.timeout_s)
        totals = self._totals[target.name]
        for outcome in outcomes:
            totals.add(outcome)
        return CollectedRecord(
            ts=now(),
            node=self._nodes[target.name],
            job=self.job,
            writer=write_target(target, totals, outcomes),
            labels=self._labels(target),
            interval_s=self.interval_s,
        )

    def _labels(self, target: TcpTarget) -> dict[str, str]:
        return {"target": target.name, **target.labels, "source": self.source}

    def failure_records(self, ts: float, reason: str) -> list[ScrapeRecord]:
        """The whole collection failed: one gap per target, on the same source as its data."""
        return [
            ScrapeRecord(
                ts=ts,
                node=self._nodes[t.name],
                job=self.job,
                labels=self._labels(t),
                interval_s=self.interval_s,
                error=reason,
            )
            for t in self.config.targets
        ]

    async def collect(self) -> list[CollectedRecord]:
        limit = asyncio.Semaphore(MAX_CONCURRENT_TARGETS)
        return list(await asyncio.gather(*(self._probe(t, limit) for t in self.config.targets)))

    async def close(self) -> None:
        return None
