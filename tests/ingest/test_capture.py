"""The capture script against the real Prometheus: what it records decodes and ingests (as the fixtures do)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tests.conftest import require_tool

SCRIPT = Path(__file__).parent / "capture_fixture.py"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("TAILHOUND_LONG_DRILLS", "") in ("", "0", "false"),
    reason="re-captures the fixtures (20 s): TAILHOUND_LONG_DRILLS=1 pytest tests/ingest; the real "
    "Prometheus remote-writes in test_prometheus_end_to_end.py and test_restarts.py on every run",
)
def test_the_capture_script_records_what_prometheus_sends(tmp_path):
    require_tool("prometheus", "apt-get install prometheus (Debian; `make test` does it as root)")  # CI: fails
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    capture = json.loads((tmp_path / "capture.json").read_text())
    assert capture["completed"] and capture["prometheus"].startswith("prometheus, version")
    ingest = RemoteWriteIngest(IngestConfig(grouping={"common_labels": ("instance", "node", "cluster")}))
    snapshots = []
    for i, entry in enumerate(capture["requests"]):
        assert "error" not in entry, entry
        result = ingest.accept((tmp_path / entry["file"]).read_bytes(), entry["headers"], now=float(i))
        assert result.status == 204 and result.rejects == []
        snapshots += result.snapshots
    snapshots += ingest.close().snapshots
    vllm = [s for s in snapshots if s.source == "vllm"]
    assert {s.node for s in snapshots} == {"gpu-node-2"} and len(vllm) >= 11
    assert sum(1 for s in vllm if s.error) == 2  # the two scrapes answered 503
    assert any(s.reset for snap in vllm for s in snap.samples if s.kind != "gauge")  # the "restart"
    assert any(e["stale_markers"] for e in capture["requests"] if "stale_markers" in e)
