"""The main job, as a user runs it: `tailhound demo` on the embedded broker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proc_helpers import processes_mentioning as _processes_mentioning

pytestmark = [pytest.mark.broker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env["COLUMNS"] = "120"
    return env


def _broker_port(output: str) -> str:
    m = re.search(r"broker kafka://127\.0\.0\.1:(\d+)", output)
    assert m, output
    return m.group(1)


def test_demo_runs_to_completion_and_prints_the_thermal_incident():
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "demo"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240
    )
    wall = time.monotonic() - t0
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "OPENED" in out and "RESOLVED" in out
    assert "gpu-thermal-throttle" in out
    assert "node gpu-node-2 / GPUs 3, 5" in out
    assert "suggested actions" in out and "Drain gpu-node-2" in out
    assert "gpu.temperature{gpu=3}" in out or "gpu.temperature{gpu=5}" in out
    assert re.search(r"incidents opened\s+│\s+1\s", out), out[-1500:]
    assert "other nodes" not in out
    for node in ("gpu-node-1", "gpu-node-3", "gpu-node-4"):
        assert f"on node {node}" not in out
    assert wall < 120, f"demo took {wall:.0f}s"
    port = _broker_port(out)
    time.sleep(0.5)
    assert _processes_mentioning(f"127.0.0.1:{port}") == [], "a broker or worker outlived the demo"


def test_ctrl_c_stops_everything_cleanly():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound", "demo"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "fleet time +05:00" in line:
                break
        else:
            pytest.fail("demo did not make progress: " + "".join(lines))
        port = _broker_port("".join(lines))
        assert _processes_mentioning(f"127.0.0.1:{port}"), "broker/worker should be running"
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + rest
    assert "Traceback" not in rest, rest
    time.sleep(0.5)
    assert _processes_mentioning(f"127.0.0.1:{port}") == []
