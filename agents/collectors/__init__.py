"""Collectors: each one measures one job and returns what it saw as scrape records.

A collector is an object with ``job`` (the recording/snapshot source name), ``interval_s`` and an
``async collect() -> list[ScrapeRecord | CollectedRecord]`` method: a scrape returns the exporter's text
(:class:`ScrapeRecord`), a native collector its values in an :class:`~tailhound.agents.render.ExpositionWriter`
(:class:`~tailhound.agents.collected.CollectedRecord`, rendered as text only when recorded). It raises
:class:`CollectError` when the whole collection failed, and the agent then publishes a gap for each of
its sources: the records of ``failure_records(ts, reason)`` when the collector has that method (they
must name the same node, job and labels as its data, so the gap lands on the right series), else one
record on its ``node``.
Collectors never publish: the agent runtime (:mod:`tailhound.agents.runtime`) schedules them and turns their
records into snapshots through :mod:`tailhound.agents.snapshot_builder`, the same path a replayed recording takes.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tailhound.errors import TailhoundError
from tailhound.recording import ScrapeRecord

if TYPE_CHECKING:
    from tailhound.agents.collected import CollectedRecord


class CollectError(TailhoundError):
    """A collection failed as a whole (endpoint down, timeout); the agent publishes a gap."""


class CollectorUnavailable(CollectError):
    """The collector cannot work on this host at all (no NVIDIA driver, no mtr): the agent logs the
    message once and turns the collector off."""


@runtime_checkable
class Collector(Protocol):
    job: str
    interval_s: float

    async def collect(self) -> list[ScrapeRecord | CollectedRecord]: ...

    async def close(self) -> None: ...


def unique_names(targets: list) -> list:
    """Validator body for collector configs: probe targets need distinct names (they label series)."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"target names must be unique, got {names}")
    return targets


def literal_address(host: str) -> tuple[int, str] | None:
    """(family, address) when `host` is an IP address written the way getaddrinfo would return it; None
    for a name. Resolving a literal through ``loop.getaddrinfo`` costs a thread-pool round trip per
    collection for the same answer."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            if socket.inet_ntop(family, socket.inet_pton(family, host)) == host:
                return family, host
        except (OSError, ValueError):
            continue
    return None


def local_node() -> str:
    """This host's short name, the default `node` of what a collector measures locally."""
    return socket.gethostname().split(".")[0] or "localhost"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 (also IPv4-mapped, ``::ffff:127.0.0.1``), ``localhost`` and ``*.localhost``."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def probe_node(host: str | None, own: str) -> str:
    """The node a probe of `host` describes: that host, or `own` (the agent's node) when the host is this
    machine (a loopback address or name), so a local nginx or engine meets the node's other signals."""
    if not host or is_loopback(host):
        return own
    return host


def now() -> float:
    return time.time()
