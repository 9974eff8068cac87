from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from tailhound.agents.collectors import CollectError, Collector, CollectorUnavailable
from tailhound.agents.collectors.procnet import (
    ProcNetCollector,
    ProcNetConfig,
    parse_netstat,
    parse_sockstat,
    render_procnet,
)
from tailhound.agents.exposition import parse_exposition, to_samples

pytestmark = pytest.mark.timeout(60)
FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED_NAMES = {
    "node_netstat_TcpExt_ListenOverflows",
    "node_netstat_TcpExt_ListenDrops",
    "node_netstat_TcpExt_TCPTimeouts",
    "node_netstat_TcpExt_TCPSynRetrans",
    "node_netstat_Tcp_RetransSegs",
    "node_netstat_Tcp_OutSegs",
    "node_netstat_Tcp_InSegs",
    "node_netstat_Tcp_CurrEstab",
    "node_netstat_Tcp_ActiveOpens",
    "node_netstat_Tcp_PassiveOpens",
    "node_netstat_Tcp_AttemptFails",
    "node_netstat_Tcp_EstabResets",
    "node_sockstat_TCP_tw",
    "node_sockstat_TCP_inuse",
    "node_sockstat_TCP_orphan",
    "node_sockstat_TCP_alloc",
    "node_sockstat_sockets_used",
}


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    (tmp_path / "net").mkdir()
    for name in ("netstat", "snmp", "sockstat"):
        shutil.copy(FIXTURES / f"proc_net_{name}.txt", tmp_path / "net" / name)
    return tmp_path


def values_of(body: str) -> dict[str, float]:
    return {s.name: s.value for s in to_samples(parse_exposition(body))}


def test_parse_netstat_fixture():
    stats = parse_netstat((FIXTURES / "proc_net_netstat.txt").read_text())
    assert set(stats) == {"TcpExt", "IpExt", "MPTcpExt"}
    assert stats["TcpExt"]["ListenOverflows"] == 1520 and stats["TcpExt"]["ListenDrops"] == 1523
    assert stats["TcpExt"]["TCPSynRetrans"] == 97 and stats["IpExt"]["InOctets"] == 629413490


def test_parse_snmp_fixture():
    stats = parse_netstat((FIXTURES / "proc_net_snmp.txt").read_text())
    assert {"Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite"} <= set(stats)
    assert stats["Tcp"]["MaxConn"] == -1
    assert stats["Tcp"]["RetransSegs"] == 4105 and stats["Tcp"]["OutSegs"] == 8120825


def test_parse_sockstat_fixture():
    stats = parse_sockstat((FIXTURES / "proc_net_sockstat.txt").read_text())
    assert stats["sockets"] == {"used": 412}
    assert stats["TCP"] == {"inuse": 318, "orphan": 2, "tw": 24810, "alloc": 330, "mem": 91}
    assert stats["FRAG"] == {"inuse": 0, "memory": 0}


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("Tcp: A B\nTcp: 1\n", "2 names but 1 values"),
        ("Tcp: A B\n", "odd number of lines"),
        ("Tcp: A\nUdp: 1\n", "'Tcp:' header followed by 'Udp:'"),
        ("Tcp: A\nTcp: x\n", "not all integers"),
    ],
)
def test_parse_netstat_errors(text, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_netstat(text)


def test_parse_sockstat_errors():
    with pytest.raises(ValueError, match="line 2"):
        parse_sockstat("sockets: used 1\nTCP: inuse\n")


def test_render_matches_node_exporter_format():
    text = render_procnet(
        {"TcpExt": {"ListenOverflows": 7, "Other": 1}},
        {"Tcp": {"CurrEstab": 3}},
        {"sockets": {"used": 9}, "TCP": {"tw": 5, "mem": 1}},
    )
    assert text == (
        "# HELP node_netstat_TcpExt_ListenOverflows Statistic TcpExtListenOverflows.\n"
        "# TYPE node_netstat_TcpExt_ListenOverflows untyped\n"
        "node_netstat_TcpExt_ListenOverflows 7\n"
        "# HELP node_netstat_Tcp_CurrEstab Statistic TcpCurrEstab.\n"
        "# TYPE node_netstat_Tcp_CurrEstab untyped\n"
        "node_netstat_Tcp_CurrEstab 3\n"
        "# HELP node_sockstat_TCP_tw Number of TCP sockets in state tw.\n"
        "# TYPE node_sockstat_TCP_tw gauge\n"
        "node_sockstat_TCP_tw 5\n"
        "# HELP node_sockstat_sockets_used Number of IPv4 sockets in use.\n"
        "# TYPE node_sockstat_sockets_used gauge\n"
        "node_sockstat_sockets_used 9\n"
    )


async def test_collector_on_fixture_files(proc_root):
    collector = ProcNetCollector(ProcNetConfig(proc_root=proc_root), node="gpu-node-1")
    assert isinstance(collector, Collector)
    [rec] = await collector.collect()
    await collector.close()
    assert rec.job == "node" and rec.node == "gpu-node-1" and rec.interval_s == 5.0
    values = values_of(rec.body)
    assert set(values) == EXPECTED_NAMES
    assert values["node_netstat_TcpExt_ListenOverflows"] == 1520
    assert values["node_netstat_TcpExt_TCPTimeouts"] == 412
    assert values["node_netstat_Tcp_InSegs"] == 9127166 and values["node_netstat_Tcp_EstabResets"] == 246
    assert values["node_sockstat_TCP_tw"] == 24810 and values["node_sockstat_sockets_used"] == 412
    assert all(s.kind == "gauge" for s in to_samples(parse_exposition(rec.body)))  # untyped parses as gauge


async def test_field_missing_from_kernel_is_absent(proc_root):
    netstat = proc_root / "net" / "netstat"
    lines = netstat.read_text().splitlines()
    names, values = lines[0].split(), lines[1].split()
    i = names.index("TCPSynRetrans")
    del names[i], values[i]
    netstat.write_text("\n".join([" ".join(names), " ".join(values), *lines[2:]]) + "\n")
    [rec] = await ProcNetCollector(ProcNetConfig(proc_root=proc_root)).collect()
    assert "node_netstat_TcpExt_TCPSynRetrans" not in values_of(rec.body)
    assert "node_netstat_TcpExt_ListenOverflows" in values_of(rec.body)


async def test_missing_file_is_unavailable_and_garbage_is_an_error(proc_root, tmp_path):
    with pytest.raises(CollectorUnavailable, match="does not exist"):
        await ProcNetCollector(ProcNetConfig(proc_root=tmp_path / "nowhere")).collect()
    (proc_root / "net" / "snmp").write_text("Tcp: A B\nTcp: 1 2 3\n")
    with pytest.raises(CollectError, match="snmp: line 1: Tcp has 2 names but 3 values"):
        await ProcNetCollector(ProcNetConfig(proc_root=proc_root)).collect()


def test_config_forbids_unknown_keys():
    with pytest.raises(ValidationError):
        ProcNetConfig(interval=5)
    assert ProcNetConfig().proc_root == Path("/proc")


def _kernel_listen_overflows() -> int:
    """Independent read of the real counter, to tell a kernel that does not count from a collector bug."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        if header.startswith("TcpExt:"):
            return int(dict(zip(header.split(), values.split(), strict=True))["ListenOverflows"])
    raise AssertionError("no TcpExt in /proc/net/netstat")


@pytest.mark.skipif(not Path("/proc/net/netstat").exists(), reason="needs Linux /proc/net")
async def test_live_accept_queue_overflow_is_counted():
    """backlog 1, never accept(), 64 non-blocking connects: the kernel drops SYNs/ACKs and counts them."""
    collector = ProcNetCollector(ProcNetConfig())
    [before] = await collector.collect()
    kernel_before = _kernel_listen_overflows()
    listener = socket.socket()
    clients: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        for _ in range(64):
            client = socket.socket()
            client.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                client.connect(listener.getsockname())
            clients.append(client)
        deadline = time.monotonic() + 3.0
        while True:
            [after] = await collector.collect()
            grown = values_of(after.body)["node_netstat_TcpExt_ListenOverflows"]
            if grown > values_of(before.body)["node_netstat_TcpExt_ListenOverflows"] or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        for client in clients:
            client.close()
        listener.close()
    if _kernel_listen_overflows() == kernel_before:
        pytest.skip(
            "this kernel/netns does not count TcpExt ListenOverflows for loopback (e.g. a gVisor sandbox); "
            "the collector cannot show what the kernel does not count"
        )
    assert grown > values_of(before.body)["node_netstat_TcpExt_ListenOverflows"]
    assert values_of(after.body)["node_netstat_TcpExt_ListenDrops"] >= grown  # ListenDrops is a superset
