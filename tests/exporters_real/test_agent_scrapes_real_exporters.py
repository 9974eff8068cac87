"""The agent's real collectors against Debian's node_exporter, blackbox_exporter and nginx (stub_status), all
on loopback with their default configurations, through the agent's own runtime and snapshot pipeline.

One agent scrapes the three for :data:`DRILL_S` seconds (15 s; a minute with ``TAILHOUND_LONG_DRILLS=1``)
every second while a second client (urllib) fetches the same URLs. Then: every body the agent recorded is
whole (the families the second client saw, ending in a complete line), no collection failed, every catalog
signal the exporters' default flags can give is in the snapshots, and the snapshots name the agent's node
(every target is on loopback, so on this machine).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlencode

import pytest

from tailhound.agents.collectors.nginx import parse_stub_status
from tailhound.agents.config import parse_agent_config
from tailhound.agents.runtime import Agent
from tailhound.recording import read_records
from tests.exporters import running, start_blackbox_exporter, start_nginx, start_node_exporter
from tests.exporters_real.drill import (
    DRILL_S,
    NOT_IN_NODE_EXPORTER_DEFAULTS,
    SecondClient,
    catalog_metrics,
    complete,
    families,
    sample_names,
)

NODE = "drill-node"
#: blackbox_exporter's default http_2xx module gives every catalog metric of the blackbox source.
NOT_IN_BLACKBOX_DEFAULTS: frozenset[str] = frozenset()


class Drill:
    """What one drill saw: the agent's records and snapshots, its error counts, the second client's bodies."""

    def __init__(self, tmp, node_url: str, probe_url: str, nginx_url: str) -> None:
        self.node_url, self.probe_url, self.nginx_url = node_url, probe_url, nginx_url
        config = parse_agent_config(
            f"node: {NODE}\nlisten: null\n"
            "scrape:\n"
            f"  - {{job: node, url: '{node_url}', interval_s: 1, timeout_s: 5}}\n"
            f"  - {{job: blackbox, url: '{probe_url}', interval_s: 1, timeout_s: 5}}\n"
            f"nginx:\n  - {{url: '{nginx_url}', worker_connections: 64, interval_s: 1}}\n"
        )
        self.snapshots: list = []
        recording = tmp / "drill.jsonl"
        with recording.open("w") as fh, SecondClient([node_url, probe_url, nginx_url]) as self.second:
            self.agent = Agent(config, self.snapshots.append, recorder=fh)
            asyncio.run(self.agent.run(duration_s=DRILL_S))
        self.records = list(read_records(recording))

    def errors(self, job: str) -> float:
        return self.agent.metrics.collect_errors.labels(job)._value.get()

    def of(self, source: str) -> list:
        return [s for s in self.snapshots if s.source == source]


@pytest.fixture(scope="module")
def drill(tmp_path_factory) -> Drill:
    tmp = tmp_path_factory.mktemp("real-exporters")
    with (
        running(start_node_exporter(tmp / "node")) as ne,
        running(start_nginx(tmp / "nginx")) as ngx,
        running(start_blackbox_exporter(tmp / "blackbox")) as bb,
    ):
        # blackbox probes nginx's `/` (a loopback HTTP server answering 200) with the default http_2xx module
        probe = f"{bb.url}/probe?" + urlencode({"target": f"{ngx.url}/", "module": "http_2xx"})
        return Drill(tmp, f"{ne.url}/metrics", probe, f"{ngx.url}/nginx_status")


def test_no_collection_failed_and_the_second_client_saw_the_same(drill):
    assert (drill.errors("node"), drill.errors("blackbox"), drill.errors("netprobe")) == (0, 0, 0)
    assert not [r.error for r in drill.records if r.error] and not [s.error for s in drill.snapshots if s.error]
    assert not drill.second.errors
    ticks = int(DRILL_S) - 2
    assert min(len(drill.of(src)) for src in ("node", "blackbox", "netprobe")) >= ticks


def test_every_node_exporter_body_is_whole(drill):
    seen = {families(b) for b in drill.second.bodies[drill.node_url]}
    bodies = [r.body for r in drill.records if r.job == "node"]
    assert bodies and all(complete(b) for b in drill.second.bodies[drill.node_url])
    cut = [i for i, b in enumerate(bodies) if not complete(b) or families(b) not in seen]
    assert not cut, f"{len(cut)} of {len(bodies)} bodies cut: ...{bodies[cut[0]][-80:]!r}"
    assert min(len(f) for f in seen) > 100  # node_exporter's default collectors: a few hundred families


def test_every_catalog_signal_node_exporter_defaults_give_arrives(drill):
    default_output = sample_names(drill.second.bodies[drill.node_url][0])
    catalog = {sm.metric for sm in catalog_metrics("node")}
    assert catalog - default_output == NOT_IN_NODE_EXPORTER_DEFAULTS
    expected = catalog & default_output
    for snap in drill.of("node"):
        assert snap.node == NODE
        assert expected <= {s.name for s in snap.samples}, sorted(expected - {s.name for s in snap.samples})


def test_blackbox_probe_of_a_loopback_target_is_whole_and_on_the_agents_node(drill):
    assert all(complete(b) for b in drill.second.bodies[drill.probe_url])
    seen = {families(b) for b in drill.second.bodies[drill.probe_url]}
    bodies = [r.body for r in drill.records if r.job == "blackbox"]
    assert bodies and all(complete(b) and families(b) in seen for b in bodies)
    mappings = catalog_metrics("blackbox")
    assert {sm.metric for sm in mappings} - sample_names(bodies[0]) == NOT_IN_BLACKBOX_DEFAULTS
    for snap in drill.of("blackbox"):
        assert snap.node == NODE  # the probed target is 127.0.0.1: this machine, not a node "127.0.0.1"
        for sm in mappings:
            assert any(s.name == sm.metric and sm.matches(s.labels) for s in snap.samples), sm
        [success] = snap.find("probe_success")
        assert success.value == 1


def test_nginx_stub_status_gives_every_ingress_signal_on_the_agents_node(drill):
    for page in drill.second.bodies[drill.nginx_url]:
        parse_stub_status(page)  # the real page has the shape the collector parses
    mappings = catalog_metrics("netprobe", "nginx_") + catalog_metrics("netprobe", "tailhound_nginx_")
    assert len(mappings) == 4
    snaps = drill.of("netprobe")
    for snap in snaps:
        assert snap.node == NODE  # the documented http://127.0.0.1:8081/nginx_status is this machine
        assert {sm.metric for sm in mappings} <= {s.name for s in snap.samples}
    requests = [next(snap.find("nginx_http_requests_total")).value for snap in snaps]
    assert requests == sorted(requests) and requests[-1] > requests[0]  # the probes and the second client
