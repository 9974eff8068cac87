"""`tailhound record`, `tailhound agent --from-recording` and `tailhound agent --config` end to end."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import httpx
import pytest

from tailhound.agents.runtime import replay
from tailhound.recording import read_records
from tailhound.snapshot import Snapshot
from tailhound.wire import is_v3, read_telemetry
from tests.http_helpers import FakeVllm, serve_metrics
from tests.kafka_helpers import consume

pytestmark = pytest.mark.broker


def env_for(settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env.update(
        TAILHOUND_BROKER=settings.broker,
        TAILHOUND_TOPIC_PREFIX=settings.topic_prefix,
        TAILHOUND_PARTITIONS=str(settings.partitions),
    )
    return env


async def run_cli(*args: str, env: dict[str, str], timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tailhound",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_record_then_publish_the_recording(settings, tmp_path):
    fake = FakeVllm(restart_at=4)
    async with serve_metrics(fake) as url:
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(f"node: ${{TH_NODE}}\nlisten: null\nscrape:\n  - {{job: vllm, url: '{url}', interval_s: 0.2}}\n")
        env = env_for(settings) | {"TH_NODE": "gpu-rec"}
        out = tmp_path / "fleet.jsonl"
        rc, stdout, stderr = await run_cli(
            "record", "--config", str(cfg), "--out", str(out), "--duration", "1.5", env=env
        )
    assert rc == 0, stderr
    records = list(read_records(out))
    assert 5 <= len(records) <= 10 and f"wrote {len(records)} records" in stdout
    assert {r.node for r in records} == {"gpu-rec"} and {r.job for r in records} == {"vllm"}

    rc, stdout, stderr = await run_cli("agent", "--from-recording", str(out), "--speed", "0", env=env)
    assert rc == 0, stderr
    assert f"published {len(records)} snapshots" in stdout
    got = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= len(records), timeout=30)
    assert all(is_v3(r.value) for r in got)  # the default wire version
    published = read_telemetry(r.value for r in got)
    expected: list[Snapshot] = []
    await replay(read_records(out), expected.append)
    assert published == expected
    assert any(s.reset for snap in published for s in snap.samples if s.kind == "counter")


async def test_agent_publishes_and_serves_its_metrics(settings, tmp_path):
    fake = FakeVllm()
    port = free_port()
    async with serve_metrics(fake) as url:
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(
            f"node: gpu-live\nlisten: 127.0.0.1:{port}\n"
            f"scrape:\n  - {{job: vllm, url: '{url}', interval_s: 0.25}}\n"
            f"procnet: {{interval_s: 0.5}}\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tailhound",
            "agent",
            "--config",
            str(cfg),
            "--duration",
            "6",
            env=env_for(settings),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        body = ""
        async with httpx.AsyncClient() as client:
            for _ in range(60):
                await asyncio.sleep(0.2)
                try:
                    body = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
                except httpx.HTTPError:
                    continue
                if "tailhound_agent_snapshots_sent_total" in body and 'job="vllm"' in body:
                    break
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    for name in (
        "tailhound_agent_collections_total",
        "tailhound_agent_outbox_messages",
        "tailhound_agent_send_latency_seconds_bucket",
        "tailhound_agent_collect_errors_total",
    ):
        assert name in body
    got = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= 20, timeout=30)
    snaps = read_telemetry(r.value for r in got)
    assert {s.source for s in snaps} == {"vllm", "node"}
    assert all(r.key == b"gpu-live" for r in got)


async def test_agent_without_broker_or_config_explains(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    rc, _, err = await run_cli("agent", env=env)
    assert rc == 2 and "--config" in err
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("node: n\nscrape:\n  - {job: vllm, url: 'http://127.0.0.1:1/metrics', intervl_s: 1}\n")
    rc, _, err = await run_cli("agent", "--config", str(cfg), env=env | {"TAILHOUND_BROKER": "kafka://127.0.0.1:1"})
    assert rc == 2 and f"{cfg}:3:" in err and "intervl_s" in err
    cfg.write_text("node: n\n")
    rc, _, err = await run_cli("agent", "--config", str(cfg), env=env)
    assert rc == 2 and "TAILHOUND_BROKER" in err
