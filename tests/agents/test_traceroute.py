from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from tailhound.agents.collectors import CollectError, CollectorUnavailable
from tailhound.agents.collectors import traceroute as tr
from tailhound.agents.collectors.traceroute import (
    DEST_UNREACHABLE,
    ECHO_REPLY,
    ECHO_REQUEST,
    TIME_EXCEEDED,
    IcmpReply,
    Tracer,
    build_echo_request,
    checksum,
    decode_seq,
    encode_seq,
    parse_reply,
    trace,
)

pytestmark = pytest.mark.timeout(30)
ME = "127.0.0.1"
DEST = "127.0.0.1"
ROUTER = "127.0.0.11"


def ip(src: str, dst: str, payload: bytes, proto: int = socket.IPPROTO_ICMP, options: bytes = b"") -> bytes:
    ihl = (20 + len(options)) // 4
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x40 | ihl,
        0,
        20 + len(options) + len(payload),
        0,
        0,
        64,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    return header + options + payload


def icmp(kind: int, rest: bytes, data: bytes, code: int = 0) -> bytes:
    raw = struct.pack("!BBH", kind, code, 0) + rest + data
    return raw[:2] + struct.pack("!H", checksum(raw)) + raw[4:]


def echo_reply(ident: int, seq: int, src: str = DEST) -> bytes:
    return ip(src, ME, icmp(ECHO_REPLY, struct.pack("!HH", ident, seq), tr.PAYLOAD))


def quoting(kind: int, ident: int, seq: int, src: str = ROUTER, dst: str = DEST, options: bytes = b"") -> bytes:
    """Time Exceeded / Unreachable from ``src`` quoting our IP header + first 8 bytes of our echo."""
    quote = ip(ME, dst, build_echo_request(ident, seq)[:8], options=options)
    return ip(src, ME, icmp(kind, b"\x00" * 4, quote))


# -- pure helpers -------------------------------------------------------------------------------------------


def test_checksum_rfc1071_example_and_odd_length():
    assert checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D  # RFC 1071 section 3
    assert checksum(bytes.fromhex("0800000012340001")) == 0xE5CA
    assert checksum(b"\x01") == checksum(b"\x01\x00") == 0xFEFF
    assert checksum(b"") == 0xFFFF


def test_build_echo_request():
    packet = build_echo_request(0x1234, 0x0001, b"")
    assert packet == bytes.fromhex("0800e5ca12340001")
    packet = build_echo_request(0x1_0005, 0x1_0007)  # masked to 16 bits
    kind, code, _, ident, seq = struct.unpack("!BBHHH", packet[:8])
    assert (kind, code, ident, seq) == (ECHO_REQUEST, 0, 5, 7)
    assert packet[8:] == tr.PAYLOAD and checksum(packet) == 0


def test_seq_encodes_cycle_and_ttl():
    seqs = {encode_seq(c, t) for c in range(tr.MAX_CYCLES) for t in (1, 30, tr.HOP_SLOTS)}
    assert len(seqs) == tr.MAX_CYCLES * 3 and max(seqs) <= 0xFFFF
    assert decode_seq(encode_seq(999, 17)) == (999, 17)
    for cycle, ttl in [(-1, 1), (tr.MAX_CYCLES, 1), (0, 0), (0, tr.HOP_SLOTS + 1)]:
        with pytest.raises(ValueError):
            encode_seq(cycle, ttl)


def test_parse_echo_reply_and_quoted_replies():
    assert parse_reply(echo_reply(7, 42)) == IcmpReply(ECHO_REPLY, DEST, DEST, 7, 42)
    assert parse_reply(quoting(TIME_EXCEEDED, 7, 43)) == IcmpReply(TIME_EXCEEDED, ROUTER, DEST, 7, 43)
    assert parse_reply(quoting(DEST_UNREACHABLE, 7, 44, dst="127.0.0.9")) == IcmpReply(
        DEST_UNREACHABLE, ROUTER, "127.0.0.9", 7, 44
    )
    # IP options in the quoted header and in the outer one: the header length is read, not assumed
    quoted = parse_reply(quoting(TIME_EXCEEDED, 7, 45, options=b"\x01" * 4))
    assert quoted == IcmpReply(TIME_EXCEEDED, ROUTER, DEST, 7, 45)
    outer = ip(ROUTER, ME, icmp(ECHO_REPLY, struct.pack("!HH", 7, 46), b""), options=b"\x01" * 8)
    assert parse_reply(outer) == IcmpReply(ECHO_REPLY, ROUTER, ROUTER, 7, 46)


def test_parse_ignores_malformed_and_foreign_packets():
    good = quoting(TIME_EXCEEDED, 7, 1)
    corrupted = bytearray(echo_reply(7, 1))
    corrupted[-1] ^= 0xFF
    udp_quote = ip(ROUTER, ME, icmp(TIME_EXCEEDED, b"\x00" * 4, ip(ME, DEST, b"\x00" * 8, proto=socket.IPPROTO_UDP)))
    reply_quote = ip(ROUTER, ME, icmp(TIME_EXCEEDED, b"\x00" * 4, ip(ME, DEST, icmp(ECHO_REPLY, b"\0" * 4, b""))))
    short_quote = ip(ROUTER, ME, icmp(TIME_EXCEEDED, b"\x00" * 4, ip(ME, DEST, b"")[:20]))
    bad_ihl = bytearray(echo_reply(7, 1))
    bad_ihl[0] = 0x44
    for packet in [
        b"",
        b"\x45" * 3,
        good[:19],
        good[:27],  # too short for an IP header / an ICMP header
        b"\x60" + echo_reply(7, 1)[1:],  # IPv6 version nibble
        bytes(bad_ihl),  # header length under 20
        ip(DEST, ME, b"\x00" * 8, proto=socket.IPPROTO_UDP),
        bytes(corrupted),  # checksum does not verify
        ip(ME, DEST, build_echo_request(7, 1)),  # our own request, seen on loopback
        ip(ROUTER, ME, icmp(5, b"\x00" * 4, b"\x00" * 28)),  # redirect: not an answer
        udp_quote,
        reply_quote,
        short_quote,
        good[:-1],  # quote cut short (and checksum broken)
    ]:
        assert parse_reply(packet) is None, packet.hex()


# -- bookkeeping ------------------------------------------------------------------------------------------


async def test_tracer_matches_only_its_own_probes_in_time():
    tracer = Tracer(DEST, ident=0x10007, max_hops=5, timeout_s=1.0)
    assert tracer.ident == 7
    s1, s2, s3 = (tracer.sent(0, ttl, at=10.0) for ttl in (1, 2, 3))
    assert not tracer.received(echo_reply(8, s3), at=10.1)  # other identifier
    assert not tracer.received(quoting(TIME_EXCEEDED, 7, s1, dst="127.0.0.9"), at=10.1)  # other destination
    assert not tracer.received(echo_reply(7, encode_seq(5, 1)), at=10.1)  # never sent
    assert not tracer.received(b"junk", at=10.1)
    assert tracer.received(quoting(TIME_EXCEEDED, 7, s1), at=10.002)
    assert not tracer.received(quoting(TIME_EXCEEDED, 7, s1), at=10.003)  # duplicate
    assert not tracer.received(quoting(TIME_EXCEEDED, 7, s2), at=11.5)  # later than the timeout: lost
    assert tracer.outstanding() and not tracer.settled.is_set()
    assert tracer.received(echo_reply(7, s3), at=10.004)
    assert tracer.dest_ttl == 3 and tracer.limit == 3
    assert not tracer.outstanding() and tracer.settled.is_set()
    hops = tracer.hops()
    assert [(h.number, h.address, h.sent, h.loss_ratio) for h in hops] == [
        (1, ROUTER, 1, 0.0),
        (2, "???", 1, 1.0),
        (3, DEST, 1, 0.0),
    ]
    assert hops[0].avg_s == pytest.approx(0.002) and hops[2].last_s == pytest.approx(0.004)
    assert not hops[1].answered and hops[1].avg_s == 0.0


async def test_tracer_statistics_and_path_end():
    tracer = Tracer(DEST, ident=1, max_hops=6, timeout_s=1.0)
    assert tracer.hops() == []  # nobody answered: no path
    for cycle, rtt in enumerate([0.010, 0.030, None, 0.020]):
        seq = tracer.sent(cycle, 2, at=float(cycle))
        if rtt is not None:
            tracer.received(quoting(TIME_EXCEEDED, 1, seq), at=cycle + rtt)
    tracer.sent(0, 1, at=0.0)
    hops = tracer.hops()  # destination not reached: one hop past the last that answered (mtr net_max)
    assert [(h.number, h.address) for h in hops] == [(1, "???"), (2, ROUTER), (3, "???")]
    hop = hops[1]
    assert (hop.sent, hop.loss_ratio) == (4, 0.25)
    assert (hop.last_s, hop.best_s, hop.worst_s) == pytest.approx((0.020, 0.010, 0.030))
    assert hop.avg_s == pytest.approx(0.020) and hop.stdev_s == pytest.approx(0.010)  # sample stdev, like mtr
    assert hops[2].sent == 0 and hops[2].loss_ratio == 1.0
    unreachable = Tracer(DEST, ident=1, max_hops=6, timeout_s=1.0)
    seq = unreachable.sent(0, 4, at=0.0)
    unreachable.received(quoting(DEST_UNREACHABLE, 1, seq), at=0.001)
    assert [h.address for h in unreachable.hops()] == ["???", "???", "???", ROUTER]  # unreachable ends the path


# -- the socket loop, with a simulated path ---------------------------------------------------------------


class FakeIcmpSocket(socket.socket):
    """A datagram socketpair end posing as a raw ICMP socket: ``respond(ttl, ident, seq)`` makes replies."""

    def __init__(self, respond) -> None:
        mine, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        super().__init__(socket.AF_UNIX, socket.SOCK_DGRAM, 0, mine.detach())
        self.setblocking(False)
        self.respond = respond
        self.ttl = 64
        self.probes: list[tuple[int, int, str]] = []

    def setsockopt(self, level, option, value):
        assert (level, option) == (socket.IPPROTO_IP, socket.IP_TTL)
        self.ttl = value

    def sendto(self, data, address):
        assert checksum(data) == 0 and data[0] == ECHO_REQUEST and address[1] == 0
        ident, seq = struct.unpack("!HH", data[4:8])
        self.probes.append((self.ttl, seq, address[0]))
        for reply in self.respond(self.ttl, ident, seq):
            self.peer.send(reply)
        return len(data)

    def close(self):
        self.peer.close()
        super().close()


async def test_trace_simulated_path_with_silent_hop_loss_and_noise(monkeypatch):
    def respond(ttl, ident, seq):
        cycle, _ = decode_seq(seq)
        noise = [
            b"\x00" * 3,
            echo_reply(ident ^ 1, seq),
            quoting(TIME_EXCEEDED, ident, seq, dst="127.0.0.9"),
            ip(ME, DEST, build_echo_request(ident, seq)),
        ]
        if ttl == 1:
            return [*noise, quoting(TIME_EXCEEDED, ident, seq), quoting(TIME_EXCEEDED, ident, seq)]
        if ttl >= 3 and cycle != 2:
            return [echo_reply(ident, seq)]
        return noise  # hop 2 never answers; the destination misses cycle 2

    sockets: list[FakeIcmpSocket] = []
    monkeypatch.setattr(tr, "open_icmp_socket", lambda: sockets.append(FakeIcmpSocket(respond)) or sockets[-1])
    loop = asyncio.get_running_loop()
    started = loop.time()
    hops = await trace(DEST, cycles=4, max_hops=8, timeout_s=0.2, interval_s=0.02)
    assert loop.time() - started < 1.0
    assert [(h.number, h.address, h.sent, h.loss_ratio) for h in hops] == [
        (1, ROUTER, 4, 0.0),
        (2, "???", 4, 1.0),
        (3, DEST, 4, 0.25),
    ]
    assert all(h.avg_s > 0 for h in (hops[0], hops[2]))
    [sock] = sockets
    assert sock.fileno() == -1  # closed
    assert {address for _, _, address in sock.probes} == {DEST}
    assert all(ttl == decode_seq(seq)[1] for ttl, seq, _ in sock.probes)
    first = sorted(ttl for ttl, seq, _ in sock.probes if decode_seq(seq)[0] == 0)
    assert first == list(range(1, len(first) + 1)) and 3 <= len(first) <= 8  # no probes past an answered end
    assert all(ttl <= 3 for ttl, seq, _ in sock.probes if decode_seq(seq)[0] > 0)  # path end learnt


async def test_trace_errors(monkeypatch):
    with pytest.raises(ValueError, match="cycles"):
        await trace(DEST, cycles=0)
    with pytest.raises(ValueError, match="max_hops"):
        await trace(DEST, cycles=1, max_hops=65)
    with pytest.raises(ValueError, match="timeout_s"):
        await trace(DEST, cycles=1, timeout_s=0)
    with pytest.raises(CollectError, match="IPv4 only"):
        await trace("::1", cycles=1)
    monkeypatch.setattr(tr, "open_icmp_socket", lambda: FakeIcmpSocket(lambda ttl, ident, seq: []))
    with pytest.raises(CollectError, match="no hop on the path to 127.0.0.1"):
        await trace(DEST, cycles=1, max_hops=3, timeout_s=0.05)

    async def hang(host):
        await asyncio.sleep(30)

    monkeypatch.setattr(tr, "_resolve", hang)
    monkeypatch.setattr(tr, "DEADLINE_SLACK_S", 0.1)
    with pytest.raises(CollectError, match="timed out after 0.15s"):
        await trace(DEST, cycles=1, timeout_s=0.05, interval_s=0)


async def test_permission_error_is_unavailable(monkeypatch):
    real_socket = socket.socket

    def no_raw(family=-1, type=-1, *args):
        if type == socket.SOCK_RAW:
            raise PermissionError(1, "Operation not permitted")
        return real_socket(family, type, *args)

    monkeypatch.setattr(tr.socket, "socket", no_raw)
    with pytest.raises(CollectorUnavailable, match="raw ICMP socket not permitted"):
        await trace(DEST, cycles=1)


# -- live, over loopback ---------------------------------------------------------------------------------


def require_raw_sockets() -> None:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    except PermissionError:
        pytest.skip("opening a raw ICMP socket raised PermissionError (needs root or CAP_NET_RAW)")


async def test_live_trace_to_loopback_is_one_hop():
    require_raw_sockets()
    hops = await trace("127.0.0.1", cycles=3, timeout_s=0.5, interval_s=0.05)
    assert len(hops) == 1
    [hop] = hops
    assert (hop.number, hop.address, hop.sent, hop.loss_ratio) == (1, "127.0.0.1", 3, 0.0)
    assert 0 < hop.best_s <= hop.avg_s <= hop.worst_s < 0.5 and hop.last_s > 0
