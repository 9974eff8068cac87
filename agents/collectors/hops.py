"""Per-hop RTT and loss to each target, mtr-style, and a route signature that notices path changes.

The supported way is the ``mtr`` binary (``mtr --json -n -c <cycles> <host>``): its helper
``mtr-packet`` needs ``cap_net_raw`` (distributions install it setcap or suid-root), so the agent
itself stays unprivileged. Without mtr, when the agent may open raw ICMP sockets (root or cap_net_raw),
the built-in IPv4 tracer (:mod:`tailhound.agents.collectors.traceroute`) measures the same numbers; with neither
the collector reports :class:`CollectorUnavailable` and the agent turns it off.

Reading the numbers (mtr semantics, ``ui/net.c``): ``Loss%`` excludes probes still in flight; loss at
an intermediate hop that does not persist to later hops is usually ICMP rate limiting on that router,
only loss that reaches the last hop is path loss. A hop whose latency jumps (2 ms -> 20 ms) and stays
high for all later hops points at that link. Run the probe from both ends (client and server agents):
the forward and return paths often differ.

The route signature hashes the ordered hop addresses (``???`` included). ECMP load balancing can make
mtr show a different address for a hop between rounds, which counts as a route change too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import CollectError, CollectorUnavailable, local_node, now, probe_node, unique_names
from tailhound.agents.collectors.hop import Hop
from tailhound.agents.collectors.traceroute import trace
from tailhound.agents.render import ExpositionWriter
from tailhound.durations import Duration
from tailhound.recording import ScrapeRecord

JOB = "netprobe"
#: At most this many mtr processes run at the same time.
MAX_CONCURRENT_MTR = 4
_KILL_WAIT_S = 5.0
_PERMISSION_HINTS = ("operation not permitted", "permission denied")


class HopTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    host: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[^\s-]\S*$",
        description="Hostname or IP; never starts with '-' (it is passed to mtr as an argument).",
    )
    node: str | None = Field(
        default=None,
        pattern=r"^\S+$",
        description=("Node the probe describes (default: host; a loopback host: the agent's node)."),
    )


class HopsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    targets: list[HopTarget] = Field(min_length=1)
    interval_s: Duration = Field(default=60.0, gt=0)
    cycles: int = Field(default=10, ge=1, le=1000, description="Probes per hop (mtr -c).")
    mtr_path: str = "mtr"
    timeout_s: Duration = Field(default=30.0, gt=0, le=600, description="Kill mtr after this long.")

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, targets: list[HopTarget]) -> list[HopTarget]:
        return unique_names(targets)


def _number(hub: dict[str, Any], key: str, index: int, default: float = 0.0) -> float:
    value = hub.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"mtr json: hub {index}: {key!r} is not a number: {value!r}") from None


def parse_mtr_json(text: str) -> list[Hop]:
    """Hops of ``mtr --json`` output (0.95 prints ``"count": 1``, older versions ``"count": "1"``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"mtr json: not JSON ({exc})") from None
    report = data.get("report") if isinstance(data, dict) else None
    hubs = report.get("hubs") if isinstance(report, dict) else None
    if not isinstance(hubs, list):
        raise ValueError("mtr json: no report.hubs list")
    hops = []
    for index, hub in enumerate(hubs):
        if not isinstance(hub, dict) or "host" not in hub:
            raise ValueError(f"mtr json: hub {index} has no host")
        hops.append(
            Hop(
                number=int(_number(hub, "count", index, default=index + 1)),
                address=str(hub["host"]),
                loss_ratio=_number(hub, "Loss%", index) / 100.0,
                sent=int(_number(hub, "Snt", index)),
                last_s=_number(hub, "Last", index) / 1000.0,
                avg_s=_number(hub, "Avg", index) / 1000.0,
                best_s=_number(hub, "Best", index) / 1000.0,
                worst_s=_number(hub, "Wrst", index) / 1000.0,
                stdev_s=_number(hub, "StDev", index) / 1000.0,
            )
        )
    return sorted(hops, key=lambda h: h.number)


def route_signature(hops: list[Hop]) -> str:
    """First 12 hex digits of the SHA-1 of the ordered hop addresses."""
    joined = "\n".join(h.address for h in sorted(hops, key=lambda h: h.number))
    return hashlib.sha1(joined.encode()).hexdigest()[:12]


def render_hops(target: HopTarget, hops: list[Hop], route_changes: int) -> str:
    """Exposition text of one target's mtr report. Hops that never answered have no RTT series."""
    return write_hops(target, hops, route_changes).text()


def write_hops(target: HopTarget, hops: list[Hop], route_changes: int) -> ExpositionWriter:
    """The families of one target's mtr report (see :func:`render_hops`)."""
    w = ExpositionWriter()
    for hop in hops:
        labels = {"target": target.name, "hop": str(hop.number), "address": hop.address}
        if hop.answered:
            w.gauge("tailhound_hop_rtt_seconds", hop.avg_s, labels, help="Mean RTT to the hop (mtr Avg).")
            w.gauge("tailhound_hop_rtt_worst_seconds", hop.worst_s, labels, help="Worst RTT to the hop (mtr Wrst).")
        w.gauge("tailhound_hop_loss_ratio", hop.loss_ratio, labels, help="Share of probes the hop did not answer.")
    base = {"target": target.name}
    w.gauge("tailhound_hop_count", len(hops), base, help="Hops on the path to the target.")
    w.gauge(
        "tailhound_route_info",
        1,
        {**base, "signature": route_signature(hops)},
        help="Route signature: SHA-1 prefix of the ordered hop addresses.",
    )
    w.counter(
        "tailhound_route_changes_total",
        route_changes,
        base,
        help="Collections whose route signature differed from the previous one.",
    )
    return w


def raw_sockets_permitted() -> bool:
    """Whether this process may open a raw ICMP socket (root or cap_net_raw)."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except OSError:
        return False
    sock.close()
    return True


def find_mtr(mtr_path: str) -> str | None:
    """Absolute path of the mtr binary; None when it is missing but raw sockets are permitted (the built-in
    tracer runs instead); CollectorUnavailable when neither."""
    found = shutil.which(mtr_path)
    if found:
        return found
    if raw_sockets_permitted():
        return None
    raise CollectorUnavailable("hops: needs mtr (with cap_net_raw) or raw sockets; per-hop probe off")


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # mtr and its mtr-packet child
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def run_mtr(mtr: str, host: str, cycles: int, timeout_s: float) -> str:
    """stdout of ``mtr --json -n -c <cycles> <host>``; CollectError on timeout or failure."""
    try:
        proc = await asyncio.create_subprocess_exec(
            mtr,
            "--json",
            "-n",
            "-c",
            str(cycles),
            host,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise CollectError(f"hops: cannot run {mtr}: {exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        _kill_group(proc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), _KILL_WAIT_S)
        raise CollectError(f"hops: mtr to {host} timed out after {timeout_s:g}s (killed)") from None
    except BaseException:
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip() or f"exit status {proc.returncode}"
        if any(hint in message.lower() for hint in _PERMISSION_HINTS):
            raise CollectorUnavailable(f"hops: mtr lacks cap_net_raw ({message[:200]}); per-hop probe off")
        raise CollectError(f"hops: mtr to {host} failed: {message[:300]}")
    return out.decode(errors="replace")


class HopsCollector:
    """Runs mtr to each target; one record per target, ``node`` = the target's ``node:``, else its host (the
    agent's own node for a loopback host)."""

    job = JOB

    def __init__(self, config: HopsConfig, node: str | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.source = node or local_node()
        self._mtr: str | None = None
        self._chosen = False  # find_mtr ran; _mtr None then means the built-in tracer
        self._signatures: dict[str, str] = {}
        self._route_changes: dict[str, int] = {t.name: 0 for t in config.targets}
        self._nodes = {t.name: t.node or probe_node(t.host, self.source) for t in config.targets}

    async def _measure(self, host: str, mtr: str | None) -> list[Hop]:
        """Hops from mtr, or from the built-in raw-socket tracer when mtr is None."""
        if mtr is None:
            try:
                return await asyncio.wait_for(trace(host, self.config.cycles), self.config.timeout_s)
            except TimeoutError:
                raise CollectError(f"hops: trace to {host} timed out after {self.config.timeout_s:g}s") from None
        text = await run_mtr(mtr, host, self.config.cycles, self.config.timeout_s)
        try:
            return parse_mtr_json(text)
        except ValueError as exc:
            raise CollectError(f"hops: {host}: {exc}") from None

    async def _probe(self, target: HopTarget, mtr: str | None, limit: asyncio.Semaphore) -> CollectedRecord:
        async with limit:
            hops = await self._measure(target.host, mtr)
        if not hops:
            raise CollectError(f"hops: mtr to {target.host} reported no hops")
        signature = route_signature(hops)
        previous = self._signatures.get(target.name)
        if previous is not None and previous != signature:
            self._route_changes[target.name] += 1
        self._signatures[target.name] = signature
        writer = write_hops(target, hops, self._route_changes[target.name])
        return CollectedRecord(
            ts=now(),
            node=self._nodes[target.name],
            job=self.job,
            writer=writer,
            interval_s=self.interval_s,
            labels={"target": target.name, "source": self.source},
        )

    def failure_records(self, ts: float, reason: str) -> list[ScrapeRecord]:
        """The whole collection failed: one gap per target, on the same source as its data."""
        return [
            ScrapeRecord(
                ts=ts,
                node=self._nodes[t.name],
                job=self.job,
                error=reason,
                interval_s=self.interval_s,
                labels={"target": t.name, "source": self.source},
            )
            for t in self.config.targets
        ]

    async def collect(self) -> list[ScrapeRecord | CollectedRecord]:
        if not self._chosen:
            self._mtr = find_mtr(self.config.mtr_path)
            self._chosen = True
        limit = asyncio.Semaphore(MAX_CONCURRENT_MTR)
        results = await asyncio.gather(
            *(self._probe(t, self._mtr, limit) for t in self.config.targets), return_exceptions=True
        )
        records: list[ScrapeRecord | CollectedRecord] = []
        errors: list[CollectError] = []
        for target, result in zip(self.config.targets, results, strict=True):
            if isinstance(result, CollectorUnavailable):
                raise result
            if isinstance(result, CollectError):
                errors.append(result)
                records.append(
                    ScrapeRecord(
                        ts=now(),
                        node=self._nodes[target.name],
                        job=self.job,
                        error=str(result),
                        interval_s=self.interval_s,
                        labels={"target": target.name, "source": self.source},
                    )
                )
            elif isinstance(result, BaseException):
                raise result
            else:
                records.append(result)
        if len(errors) == len(records):
            raise CollectError("; ".join(str(e) for e in errors))
        return records

    async def close(self) -> None:
        return None
