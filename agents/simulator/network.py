"""Network side of a node: node_exporter netstat/sockstat series and a blackbox HTTP probe.

The probe runs from outside the node against its serving endpoint, so it sees path RTT, packet
loss (TCP retransmission timeouts) and a full accept queue (dropped SYNs), but not the engine's
token latencies.
"""

from __future__ import annotations

import random

from tailhound.snapshot import CounterSample, GaugeSample, Sample

from .engine import EngineTick
from .faults import NodeEffects

PROBE_TIMEOUT_S = 5.0
BASE_RTT_S = (0.0017, 0.0024)
SYN_RTO_S = 1.0  # initial SYN retransmission timeout (doubles each retry)
DATA_RTO_S = 0.2  # minimum data retransmission timeout
#: Probability that the accept queue drops one SYN while the ingress overflows.
OVERFLOW_SYN_DROP = 0.55
PHASES = ("resolve", "connect", "tls", "processing", "transfer")


class NodeNetwork:
    """Kernel network counters (``/proc/net/snmp``, ``netstat``, ``sockstat``) of one node."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        uptime_s = rng.uniform(2, 30) * 86400.0
        self.out_segs = int(uptime_s * rng.uniform(3000, 5000))
        self.retrans_segs = int(self.out_segs * rng.uniform(0.0003, 0.0006))
        self.listen_overflows = rng.randint(0, 40)
        self.listen_drops = self.listen_overflows + rng.randint(0, 5)
        self.rx_bytes = int(uptime_s * rng.uniform(5e5, 1e6))
        self.tx_bytes = int(uptime_s * rng.uniform(5e5, 1e6))
        self.tw = 0
        self.inuse = 0
        self.estab = 0

    def update(self, dt: float, tick: EngineTick, effects: NodeEffects) -> None:
        """Advance the counters by one tick of traffic."""
        rng = self._rng
        rps = tick.completed_rps
        out_rate = 1500.0 + tick.generation_tps * 1.05 + rps * 12.0
        out = int(out_rate * dt * rng.uniform(0.95, 1.05))
        if effects.net_loss > 0:
            retrans_ratio = rng.uniform(1.2, 2.5) * effects.net_loss
        else:
            retrans_ratio = rng.uniform(0.0002, 0.0008)
        if effects.ingress_overflow:
            retrans_ratio *= 2.0
        if effects.retrans_blip:
            retrans_ratio += effects.retrans_blip
        self.out_segs += out
        self.retrans_segs += int(out * retrans_ratio)
        if effects.ingress_overflow:
            overflows = int(rng.uniform(40.0, 250.0) * dt)
            self.listen_overflows += overflows
            self.listen_drops += overflows + rng.randint(0, 3)
            self.tw = rng.randint(24_000, 28_500)
            self.estab = 4096 + rng.randint(0, 300)
        else:
            self.tw = int(150 + 25.0 * rps + rng.randint(0, 60))
            self.estab = int(80 + tick.running + tick.waiting + rng.randint(0, 20))
        self.inuse = self.estab + rng.randint(20, 60)
        self.rx_bytes += int((5e5 + tick.prompt_tps * 4.2 + rps * 600.0) * dt * rng.uniform(0.97, 1.03))
        self.tx_bytes += int((3e5 + tick.generation_tps * 260.0) * dt * rng.uniform(0.97, 1.03))

    def samples(self) -> list[Sample]:
        """node_exporter series for the counters above."""
        g, c = GaugeSample, CounterSample
        eth0 = {"device": "eth0"}
        return [
            c(name="node_netstat_Tcp_RetransSegs", value=float(self.retrans_segs)),
            c(name="node_netstat_Tcp_OutSegs", value=float(self.out_segs)),
            c(name="node_netstat_TcpExt_ListenOverflows", value=float(self.listen_overflows)),
            c(name="node_netstat_TcpExt_ListenDrops", value=float(self.listen_drops)),
            c(name="node_network_receive_bytes_total", labels=eth0, value=float(self.rx_bytes)),
            c(name="node_network_transmit_bytes_total", labels=eth0, value=float(self.tx_bytes)),
            g(name="node_sockstat_TCP_tw", value=float(self.tw)),
            g(name="node_sockstat_TCP_inuse", value=float(self.inuse)),
            g(name="node_netstat_Tcp_CurrEstab", value=float(self.estab)),
        ]


class BlackboxProbe:
    """blackbox_exporter ``http_2xx`` probe of ``http://<node>:8000/health`` from outside the node."""

    def __init__(self, rng: random.Random, node: str) -> None:
        self._rng = rng
        self.labels = {"target": f"http://{node}:8000/health", "module": "http_2xx"}
        self.success = True
        self.refused = False
        self.phases = dict.fromkeys(PHASES, 0.0)
        self.status_code = 200

    def probe(self, tick: EngineTick, effects: NodeEffects) -> None:
        """Run one probe."""
        rng = self._rng
        rtt = rng.uniform(*BASE_RTT_S) + effects.net_extra_rtt_s
        if effects.net_extra_rtt_s:
            rtt += rng.uniform(0.0, 0.008)  # jitter on the degraded path
        resolve = rng.uniform(0.0001, 0.0004)
        connect = rtt
        processing = rtt + 0.0015 + 0.004 * tick.utilization**4 + rng.uniform(0.0, 0.0005)
        transfer = rng.uniform(2e-5, 1e-4)
        failed = False
        if effects.ingress_overflow:  # the full accept queue drops SYNs; the client backs off
            backoff = SYN_RTO_S
            while rng.random() < OVERFLOW_SYN_DROP:
                connect += backoff
                backoff *= 2.0
                if resolve + connect > PROBE_TIMEOUT_S:
                    failed = True
                    break
        if effects.net_loss > 0 and not failed:
            roll = rng.random()
            if roll < 2.0 * effects.net_loss:  # lost twice in a row: the probe times out
                failed = True
            elif roll < 3.0 * effects.net_loss:  # SYN lost once
                connect += SYN_RTO_S
            elif roll < 6.0 * effects.net_loss:  # request/response segment lost once
                processing += DATA_RTO_S + rtt
        if effects.probe_syn_retry and not failed:  # noise: the first SYN was lost
            connect += SYN_RTO_S
        if effects.probe_extra_s and not failed:
            processing += effects.probe_extra_s
        if effects.health_timeout and not failed:  # /health queued behind inference past the timeout
            failed = True
        elif effects.health_extra_s and not failed:
            processing += effects.health_extra_s * rng.uniform(0.85, 1.15)
        # nothing listens (replaced, or still loading the model): connection refused at once
        self.refused = (effects.engine_down or effects.cold_start) and not failed
        failed = failed or self.refused
        if failed:
            connect = min(connect, PROBE_TIMEOUT_S - resolve)
            processing = transfer = 0.0
        self.success = not failed
        self.status_code = 0 if failed else 200
        self.phases = {
            "resolve": resolve,
            "connect": connect,
            "tls": 0.0,
            "processing": processing,
            "transfer": transfer,
        }

    def samples(self) -> list[Sample]:
        """blackbox_exporter series of the last probe."""
        g = GaugeSample
        timed_out = not self.success and not self.refused
        duration = PROBE_TIMEOUT_S if timed_out else sum(self.phases.values()) + 0.0002
        out: list[Sample] = [
            g(name="probe_success", value=1.0 if self.success else 0.0),
            g(name="probe_duration_seconds", value=round(duration, 6)),
            g(name="probe_http_status_code", value=float(self.status_code)),
        ]
        for phase in PHASES:
            out.append(
                g(name="probe_http_duration_seconds", labels={"phase": phase}, value=round(self.phases[phase], 6))
            )
        return out
