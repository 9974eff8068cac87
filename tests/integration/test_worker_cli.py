"""`tailhound worker` with no broker configured starts the bundled one, and stops it on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proc_helpers import processes_mentioning

pytestmark = [pytest.mark.broker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_worker_starts_the_bundled_broker_and_stops_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env["TAILHOUND_STREAMS__DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 30
        port = None
        while time.monotonic() < deadline and port is None:
            line = proc.stderr.readline()
            lines.append(line)
            m = re.search(r"TAILHOUND_BROKER=kafka://127\.0\.0\.1:(\d+)", line)
            port = m.group(1) if m else None
        assert port, "".join(lines)
        time.sleep(3)
        assert proc.poll() is None, "".join(lines) + proc.stderr.read()
        assert processes_mentioning(f"127.0.0.1:{port}")
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)
    assert processes_mentioning(f"127.0.0.1:{port}") == []
