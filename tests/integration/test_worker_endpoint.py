"""The worker's own endpoint on a real worker (child process, real broker): readiness after table recovery,
and /metrics with what it did -- snapshots by source, time per stage, incidents, detection lag, consumer
lag, rule coverage, intake, reloads and the notifier's deliveries -- in an exposition
`promtool check metrics` accepts."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tailhound.agents.publisher import SnapshotPublisher
from tailhound.kafka import ensure_topics
from tailhound.worker.process import WorkerProcess
from tests.conftest import require_tool
from tests.factories import dcgm_snapshot
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
T0 = 1_767_225_600.0


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _port(log_path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        m = re.search(r"worker endpoint on 127\.0\.0\.1:(\d+)", text)
        if m:
            return int(m.group(1))
        time.sleep(0.2)
    raise AssertionError(log_path.read_text(errors="replace")[-3000:])


async def test_ready_after_recovery_and_metrics_that_promtool_accepts(settings, tmp_path):
    promtool = require_tool("promtool", "apt-get install prometheus")
    s = settings
    await ensure_topics(s)
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.start()
    try:
        port = await asyncio.to_thread(_port, tmp_path / "worker.log")
        assert await asyncio.to_thread(_get, port, "/-/healthy") == (200, "tailhound worker is Healthy.\n")
        deadline = time.monotonic() + 60
        while (status := (await asyncio.to_thread(_get, port, "/-/ready"))[0]) != 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert status == 200, worker.log_tail()
        assert (await asyncio.to_thread(_get, port, "/-/ready"))[1] == "tailhound worker is Ready.\n"
        hot = {3: (88.0, 1100.0), 5: (87.0, 1150.0)}
        async with SnapshotPublisher(s) as pub:
            for i in range(12):
                await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=hot if i >= 2 else None)])
        await consume(
            s, s.incidents_topic, lambda rs: any(b'"opened"' in r.value for r in rs), timeout=90, alive=worker.alive
        )
        status, body = await asyncio.to_thread(_get, port, "/metrics")
        assert status == 200
        for needle in (
            'tailhound_snapshots_total{source="dcgm"} 12.0',
            'tailhound_stage_seconds_total{stage="rules"}',
            'tailhound_incident_events_total{event="opened",root_cause="gpu-thermal-throttle"} 1.0',
            'tailhound_incidents_open{root_cause="gpu-thermal-throttle"} 1.0',
            "tailhound_detection_lag_seconds_count 1.0",
            "tailhound_consumer_lag_messages{",
            "tailhound_worker_ready 1.0",
            "tailhound_telemetry_accepted_total",
            'tailhound_rules_reloads_total{result="failure"} 0.0',
            "tailhound_snapshot_processing_seconds_bucket",
            'tailhound_notifications_total{outcome="sent",receiver=',
            "tailhound_notifier_active ",
        ):
            assert needle in body, f"{needle!r} not in /metrics:\n{body}"
        lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        for name in ("process_resident_memory_bytes", "process_open_fds", "python_info", "python_gc_objects_collected"):
            assert f"\n{name}" in body, name
        # one log format from the first line on (Faust's own lines included), with the start line
        lines = (tmp_path / "worker.log").read_text(errors="replace").splitlines()
        start = next(line for line in lines if 'msg="tailhound worker starting"' in line)
        assert start.startswith("ts=") and " level=info " in start and " version=" in start and " web_listen=" in start
        assert all(line.startswith("ts=") for line in lines if " level=" in line)
        assert any("logger=faust" in line or "logger=mode" in line for line in lines), lines[:20]
    finally:
        worker.stop()
