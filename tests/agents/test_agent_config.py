"""agent.yaml: the example file loads, errors name file and line, env expansion, one collector per item."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tailhound.agents.config import AgentConfig, PublishConfig, load_agent_config, parse_agent_config
from tailhound.agents.runtime import build_collectors
from tailhound.errors import ConfigFileError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tailhound" / "examples" / "agent.yaml"


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    monkeypatch.setenv("NODE_IP", "10.0.0.11")
    monkeypatch.setenv("LLM_PUBLIC_URL", "https://llm.example.com")
    monkeypatch.delenv("CLUSTER_NAME", raising=False)
    return monkeypatch


def test_example_loads_with_every_collector(env):
    cfg = load_agent_config(EXAMPLE)
    assert cfg.node == "gpu-node-1"
    assert cfg.labels == {"cluster": "dev", "region": "eu-west-1"}
    assert cfg.listen == "127.0.0.1:9464"
    assert [t.job for t in cfg.scrape] == ["vllm", "tgi", "nim", "dcgm", "node", "blackbox"]
    assert cfg.scrape[0].url == "http://10.0.0.11:8000/metrics"
    assert cfg.nvml is not None and cfg.nvml.enabled
    assert cfg.procnet is not None and cfg.tcp_connect is not None and cfg.hops is not None
    assert len(cfg.nginx) == 1 and len(cfg.stream_probe) == 1
    assert cfg.publish.buffer.spill_file is None
    set_fields = set(cfg.model_dump(exclude_unset=True))
    missing = set(AgentConfig.model_fields) - set_fields
    assert not missing, f"the example leaves out {missing}"


def test_example_runs_as_shipped_with_no_variable_set_and_probes_only_this_host(monkeypatch):
    for var in (
        "NODE_NAME",
        "NODE_IP",
        "CLUSTER_NAME",
        "AGENT_LISTEN",
        "KAFKA_HOST",
        "PEER_NODE",
        "LLM_PUBLIC_URL",
        "TAILHOUND_AGENT_SPILL_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    cfg = load_agent_config(EXAMPLE)
    assert cfg.node is None and cfg.listen == "127.0.0.1:9464" and cfg.publish.buffer.spill_file is None
    hosts = {t.host for t in cfg.tcp_connect.targets} | {t.host for t in cfg.hops.targets}
    hosts |= {httpx.URL(p.endpoint).host for p in cfg.stream_probe} | {httpx.URL(t.url).host for t in cfg.scrape}
    hosts |= {httpx.URL(n.url).host for n in cfg.nginx}
    assert hosts == {"127.0.0.1"}
    monkeypatch.setenv("AGENT_LISTEN", "0.0.0.0:9464")
    monkeypatch.setenv("TAILHOUND_AGENT_SPILL_FILE", "/var/lib/tailhound/agent/outbox.jsonl")
    cfg = load_agent_config(EXAMPLE)
    assert cfg.listen == "0.0.0.0:9464"
    assert cfg.publish.buffer.spill_file == Path("/var/lib/tailhound/agent/outbox.jsonl")


def test_example_defaults_apply_without_the_optional_variables(env):
    env.delenv("NODE_IP")
    env.setenv("CLUSTER_NAME", "prod-eu")
    cfg = load_agent_config(EXAMPLE)
    assert cfg.scrape[0].url == "http://127.0.0.1:8000/metrics"
    assert cfg.labels["cluster"] == "prod-eu"


def test_build_collectors_one_per_item_with_the_right_job(env):
    cfg = load_agent_config(EXAMPLE)
    collectors = build_collectors(cfg)
    expected = [t.job for t in cfg.scrape] + ["nvml", "node", "netprobe", "netprobe"]
    expected += ["netprobe"] * len(cfg.nginx) + ["streamprobe"] * len(cfg.stream_probe)
    assert [c.job for c in collectors] == expected
    kinds = [type(c).__name__ for c in collectors[len(cfg.scrape) :]]
    assert kinds == [
        "NvmlCollector",
        "ProcNetCollector",
        "TcpConnectCollector",
        "HopsCollector",
        "NginxCollector",
        "StreamProbeCollector",
    ]
    by_kind = {type(c).__name__: c for c in collectors}
    assert by_kind["NvmlCollector"].node == "gpu-node-1"
    assert collectors[-1].node == "llm.example.com"  # a probe describes its target
    assert [c.interval_s for c in collectors[: len(cfg.scrape)]] == [t.interval_s for t in cfg.scrape]


def test_disabled_or_absent_collectors_are_not_built():
    cfg = parse_agent_config("nvml: {enabled: false}\n")
    assert build_collectors(cfg) == []
    assert build_collectors(AgentConfig()) == []


def test_unknown_key_names_file_and_line(tmp_path, env):
    path = tmp_path / "agent.yaml"
    path.write_text("node: n1\nlisten: 127.0.0.1:9464\nlsiten_port: 9464\nscrape: []\n")
    with pytest.raises(ConfigFileError) as exc:
        load_agent_config(path)
    assert str(exc.value).startswith(f"{path}:3:")
    assert "lsiten_port" in str(exc.value)


def test_unknown_key_with_a_block_value_names_the_key_line(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("node: n1\nlisten: 127.0.0.1:9464\nscrapes:\n  - job: vllm\n")
    with pytest.raises(ConfigFileError) as exc:
        load_agent_config(path)
    assert str(exc.value).startswith(f"{path}:3:")


def test_nested_unknown_key_names_its_line(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("scrape:\n  - job: vllm\n    url: http://h:8000/metrics\n    intervall_s: 5\n")
    with pytest.raises(ConfigFileError) as exc:
        load_agent_config(path)
    assert str(exc.value).startswith(f"{path}:4:")
    assert "intervall_s" in str(exc.value)


def test_unset_variable_names_the_variable_and_line(tmp_path, monkeypatch):
    monkeypatch.delenv("TAILHOUND_TEST_UNSET_HOST", raising=False)
    path = tmp_path / "agent.yaml"
    path.write_text("node: n1\nscrape:\n  - job: vllm\n    url: http://${TAILHOUND_TEST_UNSET_HOST}:8000/metrics\n")
    with pytest.raises(ConfigFileError) as exc:
        load_agent_config(path)
    assert str(exc.value).startswith(f"{path}:4:")
    assert "TAILHOUND_TEST_UNSET_HOST" in str(exc.value)


def test_default_value_and_set_variable(monkeypatch):
    monkeypatch.delenv("TAILHOUND_TEST_UNSET_HOST", raising=False)
    monkeypatch.setenv("TAILHOUND_TEST_NODE", "gpu-node-7")
    cfg = parse_agent_config(
        "node: ${TAILHOUND_TEST_NODE}\nscrape:\n  - job: dcgm\n"
        "    url: http://${TAILHOUND_TEST_UNSET_HOST:-10.1.2.3}:9400/metrics\n"
    )
    assert cfg.node == "gpu-node-7"
    assert cfg.scrape[0].url == "http://10.1.2.3:9400/metrics"


def test_invalid_value_names_its_line():
    with pytest.raises(ConfigFileError) as exc:
        parse_agent_config("node: n1\npublish:\n  compression: brotli\n", origin="a.yaml")
    assert str(exc.value).startswith("a.yaml:3:")


def test_docs_embed_the_example_and_mention_every_key():
    from tailhound.agents.collectors.hops import HopsConfig, HopTarget
    from tailhound.agents.collectors.nginx import NginxConfig
    from tailhound.agents.collectors.nvml import NvmlConfig
    from tailhound.agents.collectors.procnet import ProcNetConfig
    from tailhound.agents.collectors.scrape import ScrapeTarget
    from tailhound.agents.collectors.streamprobe import StreamProbeConfig
    from tailhound.agents.collectors.tcpconnect import TcpConnectConfig, TcpTarget
    from tailhound.agents.config import OutboxConfig, PublishConfig

    doc = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")
    assert "```yaml\n" + EXAMPLE.read_text(encoding="utf-8") + "```" in doc, "docs/agent.md: copy the example"
    models = (
        AgentConfig,
        ScrapeTarget,
        NvmlConfig,
        ProcNetConfig,
        TcpConnectConfig,
        TcpTarget,
        HopsConfig,
        HopTarget,
        NginxConfig,
        StreamProbeConfig,
        PublishConfig,
        OutboxConfig,
    )
    reference = doc.split("### Reference", 1)[1]
    missing = [f"{m.__name__}.{f}" for m in models for f in m.model_fields if f"`{f}`" not in reference]
    assert not missing, f"docs/agent.md does not describe {missing}"


def test_recording_format_example_lines_replay(tmp_path):
    import re

    from tailhound.agents.snapshot_builder import SnapshotBuilder
    from tailhound.recording import read_records

    doc = (ROOT / "docs" / "recording-format.md").read_text(encoding="utf-8")
    path = tmp_path / "example.jsonl"
    path.write_text(re.search(r"## Example.*?```json\n(.*?)```", doc, re.S).group(1), encoding="utf-8")
    builder = SnapshotBuilder()
    snaps = [builder.build(rec) for rec in read_records(path)]
    assert [s.source for s in snaps] == ["vllm", "nvml", "dcgm"]
    assert all(s.samples for s in snaps[:2]) and snaps[2].error and snaps[2].gap and not snaps[2].samples


def test_comment_lines_are_not_expanded_and_double_dollar_is_literal(tmp_path, monkeypatch):
    monkeypatch.delenv("TH_UNSET_VAR", raising=False)
    path = tmp_path / "agent.yaml"
    path.write_text('# mentions ${TH_UNSET_VAR} harmlessly\nnode: n1\nlabels: {note: "$${TH_UNSET_VAR}"}\n')
    cfg = load_agent_config(path)
    assert cfg.labels == {"note": "${TH_UNSET_VAR}"}


def test_a_node_tick_goes_in_one_message_by_default_with_wire_3_only():
    """Every worker that reads version 3 reads its bundles; a version-1 bundle (v2) needs newer workers."""
    assert PublishConfig().bundles and PublishConfig(wire=3).bundles
    assert not PublishConfig(wire=1).bundles
    assert not PublishConfig(bundle=False).bundles and PublishConfig(wire=1, bundle=True).bundles
