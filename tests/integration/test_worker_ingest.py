"""A worker with ``ingest.config`` (TAILHOUND_INGEST__CONFIG) takes Prometheus' remote write inside itself: the
request bodies captured from Prometheus 2.42 (tests/ingest/fixtures) POSTed to the worker's ingest port become
the snapshots on the telemetry topic that the receiver makes of them offline."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tailhound.kafka import ensure_topics
from tailhound.settings import IngestSettings, Settings
from tailhound.snapshot import Snapshot
from tailhound.wire import read_telemetry
from tailhound.worker.process import WorkerProcess
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
FIXTURES = Path(__file__).parents[1] / "ingest" / "fixtures"
CAPTURE = json.loads((FIXTURES / "capture.json").read_text())
GROUPING = {"common_labels": ["instance", "node", "cluster"], "settle_s": 0.5}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_snapshots() -> list[Snapshot]:
    """What the receiver makes of the captured requests (one scrape of each target per request)."""
    ingest = RemoteWriteIngest(IngestConfig(grouping=GROUPING))
    out: list[Snapshot] = []
    for i, entry in enumerate(CAPTURE["requests"]):
        out += ingest.accept((FIXTURES / entry["file"]).read_bytes(), entry["headers"], now=float(i)).snapshots
    return out + ingest.close().snapshots


def request(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def wait_for_port(port: int, worker: WorkerProcess, timeout: float = 60.0) -> None:
    """The ingest server starts with the worker's tasks, after its table recovery: poll it (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.alive(), worker.log_tail(40)
        try:
            if request(f"http://127.0.0.1:{port}/-/healthy") == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"no ingest server on port {port} within {timeout:g} s:\n{worker.log_tail(40)}")


async def test_the_worker_ingests_remote_write_and_publishes_the_snapshots(settings: Settings, tmp_path):
    port = free_port()
    config = tmp_path / "ingest.yaml"
    config.write_text(f"""listen: 127.0.0.1:{port}
remote_write:
  grouping:
    common_labels: [instance, node, cluster]
    settle_s: 0.5
auth:
  bearer_token_env: null
poll_s: 0.1
publish:
  linger_ms: 0
""")
    s = settings.model_copy(update={"ingest": IngestSettings(config=config)})
    await ensure_topics(s)
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.start()
    try:
        await asyncio.to_thread(wait_for_port, port, worker)
        for entry in CAPTURE["requests"]:
            body = (FIXTURES / entry["file"]).read_bytes()
            status = await asyncio.to_thread(request, f"http://127.0.0.1:{port}/api/v1/write", body, entry["headers"])
            assert status == 204, (entry["file"], status, worker.log_tail())
        expected = offline_snapshots()
        records = await consume(
            s, s.telemetry_topic, lambda rs: len(rs) >= len(expected), timeout=60, alive=worker.alive
        )
        log = worker.log_tail(400)
    finally:
        worker.stop(timeout=15)
    got = read_telemetry(r.value for r in records)
    assert len(got) == len(expected), log
    assert {r.key for r in records} == {b"gpu-node-2"}  # keyed by node, as the agent's
    assert sorted((x.node, x.source, x.ts) for x in got) == sorted((x.node, x.source, x.ts) for x in expected)
    by_key = {(x.node, x.source, x.ts): x for x in got}
    for x in expected:
        assert by_key[(x.node, x.source, x.ts)].model_dump() == x.model_dump()
    assert any(x.error for x in got) and any(x.gap for x in got)  # vLLM's failed scrapes: gap snapshots
    assert f"remote write on http://127.0.0.1:{port}/api/v1/write -> {s.telemetry_topic}" in log
