"""The ingest service on the real broker: Prometheus' requests (captured from Prometheus 2.42) in over HTTP,
snapshots on the telemetry topic, rejects on the dead-letter topic, back-pressure, auth, metrics, stop."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tailhound.deadletter import DeadLetter
from tailhound.ingest.config import IngestServiceConfig, parse_ingest_config
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tailhound.ingest.service import IngestService
from tailhound.settings import Settings
from tailhound.wire import read_telemetry
from tests.conftest import require_tool
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker]
FIXTURES = Path(__file__).parent / "fixtures"
CAPTURE = json.loads((FIXTURES / "capture.json").read_text())
GROUPING = {"common_labels": ["instance", "node", "cluster"], "settle_s": 0.5}


def service_config(**extra) -> IngestServiceConfig:
    base = {"listen": "127.0.0.1:0", "remote_write": {"grouping": GROUPING}, "poll_s": 0.1, "publish": {"linger_ms": 0}}
    base.update(extra)
    return IngestServiceConfig.model_validate(base)


async def post(session: aiohttp.ClientSession, port: int, body: bytes, headers: dict, path: str = "/api/v1/write"):
    async with session.post(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
    ) as r:
        return r.status, dict(r.headers), await r.text()


def offline_snapshots() -> list:
    ingest = RemoteWriteIngest(IngestConfig(grouping=GROUPING))
    out = []
    for i, entry in enumerate(CAPTURE["requests"]):
        out += ingest.accept((FIXTURES / entry["file"]).read_bytes(), entry["headers"], now=float(i)).snapshots
    return out + ingest.close().snapshots


async def test_captured_requests_become_the_snapshots_on_the_telemetry_topic(settings: Settings):
    service = IngestService(settings, service_config())
    await service.start()
    try:
        async with aiohttp.ClientSession() as session:
            for entry in CAPTURE["requests"]:
                status, _h, _t = await post(
                    session, service.port, (FIXTURES / entry["file"]).read_bytes(), entry["headers"]
                )
                assert status == 204
    finally:
        await service.stop()  # hands out the last open scrapes and flushes
    expected = offline_snapshots()
    records = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= len(expected), timeout=30)
    got = read_telemetry(r.value for r in records)
    assert sorted((s.node, s.source, s.ts) for s in got) == sorted((s.node, s.source, s.ts) for s in expected)
    assert {r.key for r in records} == {b"gpu-node-2"}  # keyed by node, as the agent's
    by_key = {(s.node, s.source, s.ts): s for s in got}
    for s in expected:
        assert by_key[(s.node, s.source, s.ts)].samples == s.samples


async def test_bad_input_is_refused_and_dead_lettered_with_the_reason(settings: Settings):
    service = IngestService(settings, service_config())
    await service.start()
    headers = CAPTURE["requests"][1]["headers"]
    try:
        async with aiohttp.ClientSession() as session:
            status, _h, text = await post(session, service.port, b"\xff\x00not snappy", headers)
            assert status == 400 and "snappy" in text.lower()
            status, _h, _t = await post(session, service.port, b"x" * 64, {**headers, "Content-Encoding": "gzip"})
            assert status == 415
            big = b"x" * (service.receiver.max_body_bytes + 1)
            status, _h, _t = await post(session, service.port, big, headers)
            assert status == 413
            async with session.get(f"http://127.0.0.1:{service.port}/metrics") as r:
                metrics = await r.text()
    finally:
        await service.stop()
    assert 'tailhound_ingest_requests_total{status="400"} 1.0' in metrics
    records = await consume(settings, settings.deadletter_topic, lambda rs: len(rs) >= 2, timeout=30)
    letters = [DeadLetter.model_validate_json(r.value) for r in records]
    assert {d.stage for d in letters} == {"decode", "headers"}
    assert all(d.topic == "prometheus-remote-write" and d.reason for d in letters)


async def test_a_token_is_required_when_one_is_configured(settings: Settings, tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    service = IngestService(
        settings, service_config(auth={"bearer_token_file": tmp_path / "token", "bearer_token_env": None})
    )
    await service.start()
    entry = CAPTURE["requests"][1]
    body = (FIXTURES / entry["file"]).read_bytes()
    try:
        async with aiohttp.ClientSession() as session:
            status, headers, _t = await post(session, service.port, body, entry["headers"])
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
            status, _h, _t = await post(
                session, service.port, body, {**entry["headers"], "Authorization": "Bearer s3cret"}
            )
            assert status == 204
    finally:
        await service.stop()


async def test_a_publisher_behind_answers_503_with_retry_after(tmp_path):
    # a broker nobody listens on: the outbox only grows
    settings = Settings(broker="kafka://127.0.0.1:9", topic_prefix="t.")
    config = service_config(
        remote_write={"grouping": {**GROUPING, "settle_s": 0}, "max_backlog": 1, "retry_after_s": 2}
    )
    service = IngestService(settings, config)
    await service.start()
    try:
        async with aiohttp.ClientSession() as session:
            statuses = []
            for entry in CAPTURE["requests"][:8]:
                status, headers, _t = await post(
                    session, service.port, (FIXTURES / entry["file"]).read_bytes(), entry["headers"]
                )
                statuses.append((status, headers.get("Retry-After")))
                await service.poll()
            async with session.get(f"http://127.0.0.1:{service.port}/-/ready") as r:
                ready = r.status, await r.text()
    finally:
        await service.stop(flush_timeout_s=0.2)
    assert statuses[0] == (204, None) and (503, "2") in statuses
    assert ready[0] == 503 and ready[1].startswith("tailhound ingest is not ready: ") and "publisher behind" in ready[1]


async def test_the_metrics_pass_promtool(settings: Settings):
    service = IngestService(settings, service_config())
    await service.start()
    try:
        async with aiohttp.ClientSession() as session:
            for entry in CAPTURE["requests"][:3]:
                await post(session, service.port, (FIXTURES / entry["file"]).read_bytes(), entry["headers"])
            await asyncio.sleep(0.3)
            async with session.get(f"http://127.0.0.1:{service.port}/metrics") as r:
                text = await r.text()
            async with session.get(f"http://127.0.0.1:{service.port}/-/healthy") as r:
                assert (r.status, await r.text()) == (200, "tailhound ingest is Healthy.\n")
    finally:
        await service.stop()
    assert 'tailhound_ingest_events_total{event="series"}' in text and "tailhound_ingest_pending_samples" in text
    assert "\nprocess_resident_memory_bytes " in text and "\npython_info{" in text  # every process serves them
    promtool = require_tool("promtool", "apt-get install prometheus")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_secrets_are_refused_in_the_file_with_a_line():
    with pytest.raises(Exception) as err:
        parse_ingest_config("listen: 127.0.0.1:9097\nremote_write:\n  bearer_tokens: [abc]\n")
    assert str(err.value).startswith("ingest.yaml:2:") and "under auth:" in str(err.value)
    with pytest.raises(Exception, match="nothing to ingest"):
        parse_ingest_config("listen: ''\n")
