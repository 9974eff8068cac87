"""TCP counters from /proc/net, under node_exporter's metric names (no root needed).

Ingress trouble in the playbook shows up here: accept-queue overflows (``ListenOverflows``; the kernel
drops the SYN or the final ACK when a listener's accept queue is full, ``ListenDrops`` is a superset),
TIME-WAIT pile-ups (``sockstat`` ``tw``, what ``ss -s`` prints as timewait) and retransmits
(``delta(RetransSegs) / delta(OutSegs)``).

The text matches node_exporter's netstat and sockstat collectors, so one catalog mapping covers this
collector and a scraped node_exporter: netstat/snmp values are ``untyped`` (HELP ``Statistic
<Proto><Field>.``) although they are cumulative kernel counters, sockstat values are gauges. The parser
turns ``untyped`` into gauge samples, so whatever computes rates must treat ``node_netstat_*`` (except
``Tcp_CurrEstab``) as counters by name. Stock node_exporter's default ``--collector.netstat.fields``
(1.5) does not include ``Tcp_AttemptFails`` or ``Tcp_EstabResets`` (tests/exporters_real checks it against
the real exporter); this collector always exports them.

All three files are per network namespace: inside a container they describe the container's netns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import CollectError, CollectorUnavailable, local_node, now
from tailhound.agents.render import ExpositionWriter
from tailhound.durations import Duration

JOB = "node"
#: (protocol, field) pairs exported from /proc/net/netstat.
NETSTAT_FIELDS = (
    ("TcpExt", "ListenOverflows"),
    ("TcpExt", "ListenDrops"),
    ("TcpExt", "TCPTimeouts"),
    ("TcpExt", "TCPSynRetrans"),
)
#: (protocol, field) pairs exported from /proc/net/snmp.
SNMP_FIELDS = tuple(
    ("Tcp", f)
    for f in (
        "RetransSegs",
        "OutSegs",
        "InSegs",
        "CurrEstab",
        "ActiveOpens",
        "PassiveOpens",
        "AttemptFails",
        "EstabResets",
    )
)
#: (protocol, field) pairs exported from /proc/net/sockstat (plus ``sockets used``).
SOCKSTAT_FIELDS = tuple(("TCP", f) for f in ("inuse", "orphan", "tw", "alloc"))


class ProcNetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interval_s: Duration = Field(default=5.0, gt=0)
    proc_root: Path = Field(default=Path("/proc"), description="procfs mount; tests point it at fixtures.")


def parse_netstat(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/netstat or /proc/net/snmp: ``Proto: names...`` / ``Proto: values...`` line pairs."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) % 2:
        raise ValueError(f"odd number of lines ({len(lines)}): header/value pairs expected")
    stats: dict[str, dict[str, int]] = {}
    for i in range(0, len(lines), 2):
        names, values = lines[i].split(), lines[i + 1].split()
        proto = names[0]
        if not proto.endswith(":") or values[0] != proto:
            raise ValueError(f"line {i + 1}: {proto!r} header followed by {values[0]!r} values")
        if len(names) != len(values):
            raise ValueError(f"line {i + 1}: {proto[:-1]} has {len(names) - 1} names but {len(values) - 1} values")
        try:
            stats[proto[:-1]] = dict(zip(names[1:], map(int, values[1:]), strict=True))
        except ValueError:
            raise ValueError(f"line {i + 2}: {proto[:-1]} values are not all integers") from None
    return stats


def parse_sockstat(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/sockstat: ``TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 91`` -> {"TCP": {"inuse": 1, ...}}."""
    stats: dict[str, dict[str, int]] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        proto, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or len(parts) % 2:
            raise ValueError(f"line {line_no}: expected 'PROTO: name value ...', got {line[:80]!r}")
        try:
            stats[proto.strip()] = dict(zip(parts[::2], map(int, parts[1::2]), strict=True))
        except ValueError:
            raise ValueError(f"line {line_no}: {proto} values are not all integers") from None
    return stats


def write_procnet(
    netstat: dict[str, dict[str, int]], snmp: dict[str, dict[str, int]], sockstat: dict[str, dict[str, int]]
) -> ExpositionWriter:
    """node_exporter-style families of the selected fields; a field the kernel lacks is left out."""
    families: dict[str, tuple[str, str, int]] = {}
    for source, fields in ((netstat, NETSTAT_FIELDS), (snmp, SNMP_FIELDS)):
        for proto, field in fields:
            if field in source.get(proto, {}):
                families[f"node_netstat_{proto}_{field}"] = (
                    "untyped",
                    f"Statistic {proto}{field}.",
                    source[proto][field],
                )
    if "used" in sockstat.get("sockets", {}):
        families["node_sockstat_sockets_used"] = (
            "gauge",
            "Number of IPv4 sockets in use.",
            sockstat["sockets"]["used"],
        )
    for proto, field in SOCKSTAT_FIELDS:
        if field in sockstat.get(proto, {}):
            families[f"node_sockstat_{proto}_{field}"] = (
                "gauge",
                f"Number of {proto} sockets in state {field}.",
                sockstat[proto][field],
            )
    w = ExpositionWriter()
    for name in sorted(families):  # client_golang sorts families by name
        type_, help_, value = families[name]
        (w.untyped if type_ == "untyped" else w.gauge)(name, value, help=help_)
    return w


def render_procnet(
    netstat: dict[str, dict[str, int]], snmp: dict[str, dict[str, int]], sockstat: dict[str, dict[str, int]]
) -> str:
    """The exposition text of :func:`write_procnet`."""
    return write_procnet(netstat, snmp, sockstat).text()


class ProcNetCollector:
    """Reads /proc/net/{netstat,snmp,sockstat} of this host's network namespace."""

    job = JOB

    def __init__(self, config: ProcNetConfig, node: str | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.node = node or local_node()
        self._paths: dict[str, Path] = {}

    def _read(self, name: str) -> str:
        path = self._paths.get(name) or self._paths.setdefault(name, self.config.proc_root / "net" / name)
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            raise CollectorUnavailable(f"procnet: {path} does not exist (no Linux procfs); TCP counters off") from None
        except OSError as exc:
            raise CollectError(f"procnet: cannot read {path}: {exc.strerror or exc}") from None

    def _parse(self, name: str, parser: Callable[[str], dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
        try:
            return parser(self._read(name))
        except ValueError as exc:
            raise CollectError(f"procnet: {self.config.proc_root / 'net' / name}: {exc}") from None

    def snapshot(self) -> ExpositionWriter:
        """The current kernel counters."""
        return write_procnet(
            self._parse("netstat", parse_netstat),
            self._parse("snmp", parse_netstat),
            self._parse("sockstat", parse_sockstat),
        )

    async def collect(self) -> list[CollectedRecord]:
        writer = self.snapshot()  # three small procfs reads: no need for a thread
        return [CollectedRecord(ts=now(), node=self.node, job=self.job, writer=writer, interval_s=self.interval_s)]

    async def close(self) -> None:
        return None
