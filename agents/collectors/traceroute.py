"""Built-in ICMP traceroute, mtr-style: per-hop RTT and loss over raw sockets, for hosts without mtr.

IPv4 only. One raw ``socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)`` per trace (root or ``cap_net_raw``). Each
cycle sends one ICMP echo request per TTL (``IP_TTL`` set per probe), with an identifier unique to this
tracer and a sequence number encoding (cycle, ttl). Routers answer Time Exceeded (type 11) quoting our
IP header and the first 8 bytes of our echo, the destination answers Echo Reply (type 0), and a
Destination Unreachable (type 3) quoting our echo ends the path at that hop like the destination does.
Replies for other identifiers or destinations are ignored (every raw ICMP socket sees all ICMP).

A probe is answered when its reply comes within ``timeout_s``; the trace waits that long after the last
cycle, so loss = 1 - replies/sent with nothing in flight. The path ends at the destination's TTL; when it
was not reached, one hop after the last that answered (mtr's ``net_max``). RTTs are taken on the event
loop (``loop.time()`` when the socket is read), so they include a little scheduling delay. Stdev is the
sample standard deviation, as mtr reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import statistics
import struct
from dataclasses import dataclass, field

from tailhound.agents.collectors import CollectError, CollectorUnavailable, literal_address
from tailhound.agents.collectors.hop import UNKNOWN_HOST, Hop

ECHO_REPLY = 0
DEST_UNREACHABLE = 3
ECHO_REQUEST = 8
TIME_EXCEEDED = 11
#: TTL slots per cycle in the sequence number: seq = cycle * HOP_SLOTS + ttl - 1.
HOP_SLOTS = 64
MAX_CYCLES = 0x10000 // HOP_SLOTS
PAYLOAD = b"tailhound-trace\x00"
#: Extra seconds on top of cycles * (interval + timeout) before the whole trace is given up.
DEADLINE_SLACK_S = 2.0
_READS_PER_WAKEUP = 256
_identifiers = itertools.count(1)


def checksum(data: bytes) -> int:
    """Internet checksum (RFC 1071): ones' complement of the ones' complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def build_echo_request(ident: int, seq: int, payload: bytes = PAYLOAD) -> bytes:
    """ICMP echo request (no IP header; the kernel adds it) with its checksum filled in."""
    ident, seq = ident & 0xFFFF, seq & 0xFFFF
    unsummed = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq) + payload
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(unsummed), ident, seq) + payload


def encode_seq(cycle: int, ttl: int) -> int:
    if not (0 <= cycle < MAX_CYCLES and 1 <= ttl <= HOP_SLOTS):
        raise ValueError(f"cycle {cycle} / ttl {ttl} out of range")
    return cycle * HOP_SLOTS + ttl - 1


def decode_seq(seq: int) -> tuple[int, int]:
    """(cycle, ttl) of a sequence number made by :func:`encode_seq`."""
    return seq // HOP_SLOTS, seq % HOP_SLOTS + 1


@dataclass(frozen=True)
class IcmpReply:
    """An ICMP answer to one of our echo requests: who answered, to which probe, for which destination."""

    kind: int
    source: str
    destination: str
    ident: int
    seq: int


def _ip_header(packet: bytes) -> int | None:
    """Length of the IPv4 ICMP packet's header, or None when it is not one."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_ICMP:
        return None
    length = (packet[0] & 0x0F) * 4
    return length if length >= 20 and len(packet) >= length + 8 else None


def parse_reply(packet: bytes) -> IcmpReply | None:
    """The reply in a raw-socket datagram (IP header included); None for anything else or malformed."""
    ihl = _ip_header(packet)
    if ihl is None:
        return None
    icmp = packet[ihl:]
    if checksum(icmp) != 0:
        return None
    source = socket.inet_ntoa(packet[12:16])
    kind = icmp[0]
    if kind == ECHO_REPLY:
        ident, seq = struct.unpack("!HH", icmp[4:8])
        return IcmpReply(kind, source, source, ident, seq)
    if kind not in (TIME_EXCEEDED, DEST_UNREACHABLE):
        return None
    quoted = icmp[8:]
    inner = _ip_header(quoted)
    if inner is None or quoted[inner] != ECHO_REQUEST:
        return None
    ident, seq = struct.unpack("!HH", quoted[inner + 4 : inner + 8])
    return IcmpReply(kind, source, socket.inet_ntoa(quoted[16:20]), ident, seq)


@dataclass
class _HopStats:
    sent: int = 0
    address: str | None = None
    rtts: list[float] = field(default_factory=list)

    def hop(self, ttl: int) -> Hop:
        rtts = self.rtts
        return Hop(
            number=ttl,
            address=self.address or UNKNOWN_HOST,
            loss_ratio=1.0 - len(rtts) / self.sent if self.sent else 1.0,
            sent=self.sent,
            last_s=rtts[-1] if rtts else 0.0,
            avg_s=statistics.fmean(rtts) if rtts else 0.0,
            best_s=min(rtts, default=0.0),
            worst_s=max(rtts, default=0.0),
            stdev_s=statistics.stdev(rtts) if len(rtts) > 1 else 0.0,
        )


class Tracer:
    """The bookkeeping of one trace: probes sent, replies matched; the socket I/O is in :func:`trace`."""

    def __init__(self, destination: str, ident: int, max_hops: int, timeout_s: float) -> None:
        self.destination = destination
        self.ident = ident & 0xFFFF
        self.max_hops = max_hops
        self.timeout_s = timeout_s
        self.dest_ttl: int | None = None
        self.stats = {ttl: _HopStats() for ttl in range(1, max_hops + 1)}
        self.pending: dict[int, tuple[int, float]] = {}
        self.settled = asyncio.Event()

    @property
    def limit(self) -> int:
        return self.dest_ttl or self.max_hops

    def sent(self, cycle: int, ttl: int, at: float) -> int:
        """Record a probe; returns its sequence number."""
        seq = encode_seq(cycle, ttl)
        self.pending[seq] = (ttl, at)
        self.stats[ttl].sent += 1
        self.settled.clear()
        return seq

    def outstanding(self) -> bool:
        return any(ttl <= self.limit for ttl, _ in self.pending.values())

    def received(self, packet: bytes, at: float) -> bool:
        """Match a datagram to a probe; False when it is not an in-time answer to one of ours."""
        reply = parse_reply(packet)
        if reply is None or reply.ident != self.ident or reply.destination != self.destination:
            return False
        probe = self.pending.pop(reply.seq, None)
        if probe is None:
            return False
        ttl, sent_at = probe
        rtt = at - sent_at
        if rtt > self.timeout_s:
            return False
        stats = self.stats[ttl]
        stats.address = stats.address or reply.source
        stats.rtts.append(max(rtt, 0.0))
        if reply.kind != TIME_EXCEEDED:
            self.dest_ttl = min(ttl, self.dest_ttl or ttl)
        if not self.outstanding():
            self.settled.set()
        return True

    def hops(self) -> list[Hop]:
        """The path: up to the destination, or one hop past the last that answered (mtr's net_max)."""
        if self.dest_ttl is not None:
            length = self.dest_ttl
        else:
            answered = [ttl for ttl, s in self.stats.items() if s.rtts]
            length = min(max(answered) + 1, self.max_hops) if answered else 0
        return [self.stats[ttl].hop(ttl) for ttl in range(1, length + 1)]


def open_icmp_socket() -> socket.socket:
    """A non-blocking raw ICMP socket; CollectorUnavailable without root or cap_net_raw."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except PermissionError as exc:
        raise CollectorUnavailable(f"hops: raw ICMP socket not permitted ({exc}); per-hop probe off") from None
    except OSError as exc:
        raise CollectError(f"hops: cannot open a raw ICMP socket: {exc}") from None
    sock.setblocking(False)
    return sock


async def _resolve(host: str) -> str:
    literal = literal_address(host)
    if literal is not None and literal[0] == socket.AF_INET:
        return literal[1]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise CollectError(f"hops: cannot resolve {host} to IPv4 (built-in tracer is IPv4 only): {exc}") from None
    return str(infos[0][4][0])


def _read_all(sock: socket.socket, tracer: Tracer, loop: asyncio.AbstractEventLoop) -> None:
    for _ in range(_READS_PER_WAKEUP):
        try:
            packet = sock.recv(65535)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return  # e.g. ICMP errors queued on the socket; the probe counts as lost
        tracer.received(packet, loop.time())


async def _run(host: str, cycles: int, max_hops: int, timeout_s: float, interval_s: float) -> list[Hop]:
    destination = await _resolve(host)
    loop = asyncio.get_running_loop()
    tracer = Tracer(destination, (os.getpid() & 0xFFFF) ^ next(_identifiers), max_hops, timeout_s)
    sock = open_icmp_socket()
    try:
        loop.add_reader(sock.fileno(), _read_all, sock, tracer, loop)
        try:
            last_sent = loop.time()
            for cycle in range(cycles):
                if cycle:
                    await asyncio.sleep(interval_s)
                for ttl in range(1, tracer.max_hops + 1):
                    if ttl > tracer.limit:  # the destination already answered a lower TTL: it would answer
                        break  # these too, and hops() ends at it (a near target, e.g. in the same rack)
                    last_sent = loop.time()
                    seq = tracer.sent(cycle, ttl, last_sent)
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
                    with contextlib.suppress(BlockingIOError):  # send buffer full: a lost probe
                        sock.sendto(build_echo_request(tracer.ident, seq), (destination, 0))
                    await asyncio.sleep(0)  # let replies be read (and timed) between probes
            if tracer.outstanding():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(tracer.settled.wait(), max(0.0, last_sent + timeout_s - loop.time()))
        finally:
            loop.remove_reader(sock.fileno())
    except OSError as exc:
        raise CollectError(f"hops: tracing {host} ({destination}) failed: {exc}") from None
    finally:
        sock.close()
    hops = tracer.hops()
    if not hops:
        raise CollectError(f"hops: no hop on the path to {host} ({destination}) answered")
    return hops


async def trace(
    host: str, cycles: int, max_hops: int = 30, timeout_s: float = 1.0, interval_s: float = 0.1
) -> list[Hop]:
    """Per-hop RTT and loss to ``host`` from ``cycles`` rounds of ICMP probes (IPv4, raw socket).

    Raises CollectorUnavailable without raw-socket permission, CollectError when the host does not
    resolve, sending fails, no hop answers or the whole trace overruns its deadline.
    """
    if not 1 <= cycles <= MAX_CYCLES:
        raise ValueError(f"cycles must be 1..{MAX_CYCLES}, got {cycles}")
    if not 1 <= max_hops <= HOP_SLOTS:
        raise ValueError(f"max_hops must be 1..{HOP_SLOTS}, got {max_hops}")
    if not (0 < timeout_s <= 60 and 0 <= interval_s <= 60):
        raise ValueError(f"timeout_s must be in (0, 60] and interval_s in [0, 60], got {timeout_s}, {interval_s}")
    deadline = cycles * (interval_s + timeout_s) + DEADLINE_SLACK_S
    try:
        return await asyncio.wait_for(_run(host, cycles, max_hops, timeout_s, interval_s), deadline)
    except TimeoutError:
        raise CollectError(f"hops: trace to {host} timed out after {deadline:g}s") from None
