"""Hot reload through the real broker while snapshots flow: an invalid rule pack is rejected over
``POST /-/reload`` (422, every problem, the old rules keep running), a valid one is swapped in on SIGHUP,
and the open incident carries over to the new rules (it resolves when the new threshold no longer holds)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
import urllib.error
import urllib.request

import pytest

from tailhound.agents.publisher import SnapshotPublisher
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics
from tailhound.worker.process import WorkerProcess
from tests.factories import dcgm_snapshot
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
T0 = 1_767_225_600.0
RULE = """groups:
  - name: t
    rules:
      - name: hot
        scope: gpu
        when: {{signal: gpu.temperature, above: {limit}}}
        severity: critical
        root_cause: gpu-thermal-throttle
"""


def _wait_for(log_path, pattern: str, timeout: float = 60.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log_path.read_text(errors="replace")) if log_path.exists() else None
        if m:
            return m
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in the worker log:\n{log_path.read_text(errors='replace')[-3000:]}")


def _post(port: int, path: str) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def test_reload_rejects_a_bad_pack_and_swaps_a_good_one_in_while_snapshots_flow(settings, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "t.yaml").write_text(RULE.format(limit=85))
    s = settings.model_copy(
        update={
            "rules_dir": rules,
            "streams": settings.streams.model_copy(update={"rules_watch_s": 0.0}),
            "notifier": settings.notifier.model_copy(update={"allow_unauthenticated_writes": True, "enabled": False}),
        }
    )
    await ensure_topics(s)
    log = tmp_path / "worker.log"
    worker = WorkerProcess(s, log)
    worker.start()
    try:
        port = int(_wait_for(log, r"worker endpoint on 127\.0\.0\.1:(\d+)").group(1))
        hot = {3: (88.0, 1100.0)}
        i = 0
        async with SnapshotPublisher(s) as pub:

            async def publish(n: int) -> None:
                nonlocal i
                for _ in range(n):
                    await pub.publish([dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=hot)])
                    i += 1
                    await asyncio.sleep(0.05)

            await publish(4)
            opened = await consume(
                s, s.incidents_topic, lambda rs: any(b'"opened"' in r.value for r in rs), timeout=90, alive=worker.alive
            )
            first = IncidentEvent.model_validate_json(opened[0].value)
            assert first.rule == "hot" and first.rules_version and first.rule_origin == "rules/t.yaml:4"

            (rules / "t.yaml").write_text(RULE.format(limit=85).replace("critical", "critcal"))
            status, body = await asyncio.to_thread(_post, port, "/-/reload")
            assert status == 422 and not body["ok"] and body["version"] == first.rules_version
            assert any("did you mean 'critical'?" in p for p in body["problems"]), body
            await publish(2)  # the old rules still run: the incident stays open
            assert worker.alive(), worker.log_tail()

            (rules / "t.yaml").write_text(RULE.format(limit=95))
            worker.proc.send_signal(signal.SIGHUP)
            _wait_for(log, r"rule reload \(SIGHUP\): 1 rules, version sha256:")
            await publish(3)  # 88 C is below the new threshold: the incident resolves
        records = await consume(
            s, s.incidents_topic, lambda rs: any(b'"resolved"' in r.value for r in rs), timeout=90, alive=worker.alive
        )
        events = [IncidentEvent.model_validate_json(r.value) for r in records]
        assert [e.event for e in events] == ["opened", "resolved"], worker.log_tail()
        assert events[1].incident_id == first.incident_id and events[1].rules_version != first.rules_version
        assert worker.alive(), worker.log_tail()
        metrics = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        )
        assert 'tailhound_rules_reloads_total{result="failure"} 1.0' in metrics
        assert 'tailhound_rules_reloads_total{result="success"} 1.0' in metrics
        assert "tailhound_rules_last_reload_successful 1.0" in metrics
    finally:
        worker.stop()
