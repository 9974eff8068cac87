"""Which node a probe's records describe: ``node:`` when set, the target's host otherwise, and the agent's own
node when the target is this machine (a loopback address or name)."""

from __future__ import annotations

import pytest

from tailhound.agents.collectors import is_loopback, probe_node
from tailhound.agents.collectors.hops import HopsCollector, HopsConfig
from tailhound.agents.collectors.nginx import NginxCollector, NginxConfig
from tailhound.agents.collectors.scrape import ScrapeTarget, target_node
from tailhound.agents.collectors.streamprobe import StreamProbeCollector
from tailhound.agents.collectors.tcpconnect import TcpConnectCollector, TcpConnectConfig
from tailhound.agents.config import parse_agent_config
from tailhound.agents.runtime import build_collectors


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.3.2.1",
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
        "localhost",
        "LOCALHOST",
        "localhost.",
        "api.localhost",
    ],
)
def test_loopback_hosts(host):
    assert is_loopback(host) and probe_node(host, "gpu-1") == "gpu-1"


@pytest.mark.parametrize(
    "host", ["10.0.0.1", "128.0.0.1", "::2", "llm.example.com", "localhost.example.com", "mylocalhost"]
)
def test_other_hosts_are_themselves(host):
    assert not is_loopback(host) and probe_node(host, "gpu-1") == host


AGENT_YAML = """\
node: gpu-7
scrape:
  - {job: blackbox, url: "http://127.0.0.1:9115/probe?target=http://127.0.0.1:8000/health&module=http_2xx"}
  - {job: blackbox, url: "http://127.0.0.1:9115/probe?target=llm.example.com:443&module=tcp_connect"}
  - {job: blackbox, url: "http://127.0.0.1:9115/probe?target=localhost:8000", node: edge-1}
nginx:
  - {url: "http://127.0.0.1:8081/nginx_status", worker_connections: 8192}
  - {url: "http://lb-2.internal:8081/nginx_status", worker_connections: 8192}
  - {url: "http://127.0.0.1:8082/nginx_status", worker_connections: 8192, node: ingress-a}
stream_probe:
  - {name: local, endpoint: "http://localhost:8000", model: m}
  - {name: public, endpoint: "https://llm.example.com", model: m}
tcp_connect:
  targets:
    - {name: engine, host: 127.0.0.1, port: 8000}
    - {name: kafka, host: kafka-0.internal, port: 9092}
    - {name: pinned, host: 10.0.0.5, port: 9092, node: kafka-1}
hops:
  targets:
    - {name: self, host: "::1"}
    - {name: remote, host: 10.0.0.9}
    - {name: named, host: 10.0.0.10, node: router-1}
"""


def test_every_probe_of_a_loopback_target_lands_on_the_agents_node():
    cfg = parse_agent_config(AGENT_YAML)
    scrape_nodes = [target_node(t, "gpu-7") for t in cfg.scrape]
    assert scrape_nodes == ["gpu-7", "llm.example.com", "edge-1"]
    collectors = build_collectors(cfg)
    nginx = [c.node for c in collectors if isinstance(c, NginxCollector)]
    assert nginx == ["gpu-7", "lb-2.internal", "ingress-a"]
    probes = [c.node for c in collectors if isinstance(c, StreamProbeCollector)]
    assert probes == ["gpu-7", "llm.example.com"]
    [tcp] = [c for c in collectors if isinstance(c, TcpConnectCollector)]
    assert [r.node for r in tcp.failure_records(1.0, "x")] == ["gpu-7", "kafka-0.internal", "kafka-1"]
    assert {r.labels["source"] for r in tcp.failure_records(1.0, "x")} == {"gpu-7"}
    [hops] = [c for c in collectors if isinstance(c, HopsCollector)]
    assert [r.node for r in hops.failure_records(1.0, "x")] == ["gpu-7", "10.0.0.9", "router-1"]


def test_collectors_built_alone_fall_back_to_the_hosts_name(monkeypatch):
    from tailhound.agents import collectors

    monkeypatch.setattr(collectors.socket, "gethostname", lambda: "box-3.example.com")
    assert NginxCollector(NginxConfig(url="http://127.0.0.1:8081/nginx_status", worker_connections=1)).node == "box-3"
    tcp = TcpConnectCollector(TcpConnectConfig(targets=[{"name": "e", "host": "localhost", "port": 1}]))
    hops = HopsCollector(HopsConfig(targets=[{"name": "e", "host": "127.0.0.1"}]))
    assert tcp.failure_records(1.0, "x")[0].node == hops.failure_records(1.0, "x")[0].node == "box-3"


def test_node_option_is_checked():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        NginxConfig(url="http://127.0.0.1:8081/nginx_status", worker_connections=1, node="two words")
    assert ScrapeTarget(job="blackbox", url="http://bb/probe?target=127.0.0.1", node="n1").node == "n1"
