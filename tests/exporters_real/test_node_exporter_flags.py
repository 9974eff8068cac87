"""The two catalog signals node_exporter's default flags cannot give arrive once its netstat field list names
them: the flag `tailhound doctor` tells people to add, run against the real exporter."""

from __future__ import annotations

import asyncio

from tailhound.agents.config import parse_agent_config
from tailhound.agents.runtime import Agent
from tests.exporters import running, start_node_exporter
from tests.exporters_real.drill import NOT_IN_NODE_EXPORTER_DEFAULTS, catalog_metrics

#: node_exporter 1.5's default --collector.netstat.fields with Tcp_AttemptFails and Tcp_EstabResets added
NETSTAT_FIELDS = (
    "^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)"
    "|TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts)"
    "|Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|PassiveOpens|RetransSegs|CurrEstab|AttemptFails|EstabResets)"
    "|Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors))$"
)


def test_netstat_fields_flag_brings_every_node_signal(tmp_path):
    with running(start_node_exporter(tmp_path, f"--collector.netstat.fields={NETSTAT_FIELDS}")) as ne:
        config = parse_agent_config(
            f"node: n1\nlisten: null\nscrape:\n  - {{job: node, url: '{ne.url}/metrics', "
            "interval_s: 1, timeout_s: 5}\n"
        )
        snapshots: list = []
        agent = Agent(config, snapshots.append)
        asyncio.run(agent.run(duration_s=3.0))
    assert snapshots and not [s.error for s in snapshots if s.error]
    catalog = {sm.metric for sm in catalog_metrics("node")}
    assert catalog >= NOT_IN_NODE_EXPORTER_DEFAULTS
    for snap in snapshots:
        assert catalog <= {s.name for s in snap.samples}, sorted(catalog - {s.name for s in snap.samples})
