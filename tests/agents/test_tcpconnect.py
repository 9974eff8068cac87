from __future__ import annotations

import asyncio
import contextlib
import errno
import socket

import pytest
from pydantic import ValidationError

from tailhound.agents.collectors import Collector
from tailhound.agents.collectors.tcpconnect import (
    CONNECT_BUCKETS,
    ConnectOutcome,
    ConnectTotals,
    TcpConnectCollector,
    TcpConnectConfig,
    TcpTarget,
    classify_connect_error,
    render_target,
)
from tailhound.agents.exposition import parse_exposition, to_samples

pytestmark = pytest.mark.timeout(60)


def samples_of(body: str) -> dict[tuple[str, tuple], object]:
    return {(s.name, tuple(sorted(s.labels.items()))): s for s in to_samples(parse_exposition(body))}


def one(body: str, name: str, **labels: str):
    found = [
        s
        for s in to_samples(parse_exposition(body))
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def server_port():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5)


def test_config_forbids_unknown_keys_and_duplicate_names():
    with pytest.raises(ValidationError):
        TcpConnectConfig(targets=[{"name": "a", "host": "h", "port": 1}], bogus=1)
    with pytest.raises(ValidationError):
        TcpConnectConfig(targets=[{"name": "a", "host": "h", "port": 1}, {"name": "a", "host": "g", "port": 2}])
    with pytest.raises(ValidationError):
        TcpTarget(name="a", host="h", port=1, labels={"target": "x"})
    cfg = TcpConnectConfig(targets=[{"name": "a", "host": "h", "port": 1}])
    assert (cfg.interval_s, cfg.attempts, cfg.timeout_s) == (5.0, 3, 1.0)


def test_classify_connect_error():
    assert classify_connect_error(ConnectionRefusedError()) == "refused"
    assert classify_connect_error(TimeoutError()) == "timeout"
    assert classify_connect_error(OSError(errno.EHOSTUNREACH, "no route")) == "unreachable"
    assert classify_connect_error(OSError(errno.ENETUNREACH, "unreachable")) == "unreachable"
    assert classify_connect_error(socket.gaierror(socket.EAI_NONAME, "unknown")) == "dns"
    assert classify_connect_error(ConnectionResetError()) == "reset"
    assert classify_connect_error(OSError(errno.EINVAL, "?")) == "other"


def test_render_target_pure():
    target = TcpTarget(name="api", host="10.0.0.5", port=8000)
    totals = ConnectTotals()
    outcomes = [
        ConnectOutcome(duration_s=0.0004),
        ConnectOutcome(duration_s=0.003),
        ConnectOutcome(duration_s=0.0015),
        ConnectOutcome(reason="timeout"),
    ]
    for o in outcomes:
        totals.add(o)
    body = render_target(target, totals, outcomes)
    labels = {"target": "api", "address": "10.0.0.5:8000"}
    hist = one(body, "tailhound_tcp_connect_duration_seconds", **labels)
    assert hist.kind == "histogram" and hist.le == list(CONNECT_BUCKETS)
    assert hist.count == 3 and hist.sum == pytest.approx(0.0049)
    assert hist.counts[CONNECT_BUCKETS.index(0.0005)] == 1 and hist.counts[CONNECT_BUCKETS.index(0.005)] == 3
    assert one(body, "tailhound_tcp_connect_attempts_total", **labels).value == 4
    assert one(body, "tailhound_tcp_connect_failures_total", **labels).kind == "counter"
    assert one(body, "tailhound_tcp_connect_errors_total", reason="timeout").value == 1
    assert one(body, "tailhound_tcp_connect_errors_total", reason="refused").value == 0
    assert one(body, "tailhound_tcp_connect_last_seconds", **labels).value == pytest.approx(0.0015)
    assert one(body, "tailhound_tcp_connect_failure_ratio", **labels).value == 0.25


def test_render_without_success_has_no_last_seconds():
    target = TcpTarget(name="api", host="h", port=1)
    totals = ConnectTotals()
    outcomes = [ConnectOutcome(reason="refused")] * 2
    for o in outcomes:
        totals.add(o)
    names = {name for name, _ in samples_of(render_target(target, totals, outcomes))}
    assert "tailhound_tcp_connect_last_seconds" not in names
    assert "tailhound_tcp_connect_failure_ratio" in names


async def test_successful_connects_grow_across_collections(server_port):
    cfg = TcpConnectConfig(
        targets=[{"name": "local", "host": "127.0.0.1", "port": server_port, "labels": {"role": "ingress"}}],
        attempts=3,
        timeout_s=2.0,
    )
    collector = TcpConnectCollector(cfg, node="prober-1")
    assert isinstance(collector, Collector)
    [first] = await collector.collect()
    [second] = await collector.collect()
    await collector.close()
    assert first.job == "netprobe" and first.node == "prober-1"  # a loopback target is the prober's own node
    assert first.labels == {"target": "local", "role": "ingress", "source": "prober-1"}
    assert first.interval_s == 5.0
    labels = {"target": "local", "address": f"127.0.0.1:{server_port}"}
    assert one(first.body, "tailhound_tcp_connect_attempts_total", **labels).value == 3
    assert one(second.body, "tailhound_tcp_connect_attempts_total", **labels).value == 6
    assert one(second.body, "tailhound_tcp_connect_failures_total", **labels).value == 0
    hist = one(second.body, "tailhound_tcp_connect_duration_seconds", **labels)
    assert hist.count == 6 and hist.sum > 0
    last = one(second.body, "tailhound_tcp_connect_last_seconds", **labels).value
    assert 0 < last < 2.0
    assert one(second.body, "tailhound_tcp_connect_failure_ratio", **labels).value == 0


async def test_closed_port_counts_refused():
    port = free_port()
    cfg = TcpConnectConfig(targets=[{"name": "closed", "host": "127.0.0.1", "port": port}], attempts=2, timeout_s=2.0)
    collector = TcpConnectCollector(cfg)
    [first] = await collector.collect()
    [second] = await collector.collect()
    assert one(first.body, "tailhound_tcp_connect_failures_total").value == 2
    assert one(second.body, "tailhound_tcp_connect_failures_total").value == 4
    assert one(second.body, "tailhound_tcp_connect_errors_total", reason="refused").value == 4
    assert one(second.body, "tailhound_tcp_connect_failure_ratio").value == 1.0
    assert one(second.body, "tailhound_tcp_connect_duration_seconds").count == 0
    assert "tailhound_tcp_connect_last_seconds" not in second.body


async def test_unresolvable_host_counts_dns():
    cfg = TcpConnectConfig(
        targets=[{"name": "nx", "host": "no-such-host.invalid", "port": 80}], attempts=2, timeout_s=2.0
    )
    [rec] = await TcpConnectCollector(cfg).collect()
    assert rec.node == "no-such-host.invalid"
    assert one(rec.body, "tailhound_tcp_connect_errors_total", reason="dns").value == 2


async def test_targets_are_probed_concurrently(server_port):
    closed = free_port()
    cfg = TcpConnectConfig(
        targets=[
            {"name": "up", "host": "127.0.0.1", "port": server_port},
            {"name": "down", "host": "127.0.0.1", "port": closed},
        ],
        attempts=1,
    )
    records = await TcpConnectCollector(cfg).collect()
    assert [r.labels["target"] for r in records] == ["up", "down"]
    assert one(records[0].body, "tailhound_tcp_connect_failure_ratio").value == 0
    assert one(records[1].body, "tailhound_tcp_connect_failure_ratio").value == 1


async def test_full_accept_queue_times_out():
    """A listener that never accepts: once its accept queue is full the kernel drops new SYNs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(4):  # backlog 1 admits 2; the rest wait in SYN retransmission
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            fillers.append(s)
        await asyncio.sleep(0.2)
        cfg = TcpConnectConfig(targets=[{"name": "full", "host": "127.0.0.1", "port": port}], attempts=2, timeout_s=0.3)
        [rec] = await TcpConnectCollector(cfg).collect()
    finally:
        for s in fillers:
            s.close()
        listener.close()
    assert one(rec.body, "tailhound_tcp_connect_errors_total", reason="timeout").value == 2
    assert one(rec.body, "tailhound_tcp_connect_failure_ratio").value == 1.0


def test_ip_literals_are_not_resolved_through_the_thread_pool():
    from tailhound.agents.collectors import literal_address

    assert literal_address("127.0.0.1") == (socket.AF_INET, "127.0.0.1")
    assert literal_address("::1") == (socket.AF_INET6, "::1")
    for name in ("localhost", "127.1", "0:0::1", "10.0.0.1.example", "fe80::1%eth0", ""):
        assert literal_address(name) is None  # names and non-canonical spellings go to getaddrinfo


async def test_a_literal_target_skips_getaddrinfo(monkeypatch, server_port):
    from tailhound.agents.collectors.tcpconnect import resolve_address

    async def no_dns(*args, **kwargs):
        raise AssertionError("getaddrinfo must not run for an IP literal")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", no_dns)
    assert await resolve_address("127.0.0.1", server_port, 1.0) == (socket.AF_INET, "127.0.0.1")
    cfg = TcpConnectConfig(targets=[{"name": "lb", "host": "127.0.0.1", "port": server_port}], attempts=2)
    [rec] = await TcpConnectCollector(cfg).collect()
    assert one(rec.body, "tailhound_tcp_connect_attempts_total").value == 2
    assert one(rec.body, "tailhound_tcp_connect_failures_total").value == 0
