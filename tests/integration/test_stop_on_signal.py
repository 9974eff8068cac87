"""SIGINT/SIGTERM stop `tailhound demo`, `tailhound worker` and `tailhound agent` within 5 s, on a busy machine.

Each runs as a real process next to busy loops that keep every CPU occupied (``TAILHOUND_TEST_BUSY_LOOPS``
sets how many; default: one per CPU, at most 4). The time from the signal to the exit is printed
(``STOP <what> <seconds>``) and must stay under STOP_LIMIT_S. Before the bounded shutdowns the demo took
more than 30 s to stop on a loaded machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailhound.broker import free_port
from tests.proc_helpers import processes_mentioning

pytestmark = [pytest.mark.broker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
STOP_LIMIT_S = 5.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


@pytest.fixture
def busy_machine() -> Iterator[int]:
    """Busy loops on every CPU while the test runs (they stop with it)."""
    n = int(os.environ.get("TAILHOUND_TEST_BUSY_LOOPS", min(os.cpu_count() or 1, 4)))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def _wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    pytest.fail(f"no line matching {pattern!r} within {timeout:.0f} s:\n" + "".join(lines[-40:]))


def _stop(proc: subprocess.Popen[str], sig: signal.Signals, what: str) -> tuple[float, str]:
    """Send `sig`, wait for the exit; (seconds it took, the rest of the output)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - t0
    print(f"STOP {what} {took:.2f}")
    return took, rest


def test_demo_stops_within_5s_of_ctrl_c_on_a_busy_machine(busy_machine):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound", "demo"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _wait_for_line(proc, r"fleet time \+05:00", timeout=120)
        port = re.search(r"broker kafka://127\.0\.0\.1:(\d+)", "".join(lines)).group(1)
        assert processes_mentioning(f"127.0.0.1:{port}"), "the broker and the worker should be running"
        took, rest = _stop(proc, signal.SIGINT, f"demo (busy loops: {busy_machine})")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest, rest
    assert took < STOP_LIMIT_S, f"the demo took {took:.1f} s to stop after SIGINT"
    time.sleep(0.5)
    assert processes_mentioning(f"127.0.0.1:{port}") == [], "the broker or the worker outlived the demo"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_worker_stops_within_5s_of_a_signal_on_a_busy_machine(busy_machine, tmp_path, sig):
    """`tailhound worker` with the bundled broker: the worker and the broker it started are gone in 5 s."""
    env = _env(
        TAILHOUND_STREAMS__DATA_DIR=str(tmp_path / "data"),
        TAILHOUND_STREAMS__LOG_LEVEL="info",
        TAILHOUND_NOTIFIER__API_LISTEN="127.0.0.1:0",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _wait_for_line(proc, r"Worker\]: Ready", timeout=120)
        port = re.search(r"TAILHOUND_BROKER=kafka://127\.0\.0\.1:(\d+)", "".join(lines)).group(1)
        took, rest = _stop(proc, sig, f"worker {sig.name} (busy loops: {busy_machine})")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < STOP_LIMIT_S, f"the worker took {took:.1f} s to stop after {sig.name}:\n{rest[-3000:]}"
    time.sleep(0.5)
    assert processes_mentioning(f"127.0.0.1:{port}") == [], "the bundled broker outlived the worker"


def test_agent_stops_within_5s_of_ctrl_c_with_the_broker_gone(busy_machine, tmp_path):
    """The worst case for the agent: nothing can be flushed (no broker), the outbox is full of snapshots."""
    cfg = tmp_path / "agent.yaml"
    dead = free_port()  # nothing listens there: the metrics scrape fails (gap snapshots), the broker is down
    cfg.write_text(
        f"node: gpu-stop\nlisten: null\nscrape:\n  - {{job: vllm, url: 'http://127.0.0.1:{dead}/metrics', "
        "interval_s: 0.2}\n"
    )
    env = _env(TAILHOUND_BROKER=f"kafka://127.0.0.1:{free_port()}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound", "agent", "--config", str(cfg)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_line(proc, r"broker unreachable", timeout=60)
        time.sleep(1.0)
        took, rest = _stop(proc, signal.SIGINT, f"agent (broker gone, busy loops: {busy_machine})")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in rest, rest
    assert took < STOP_LIMIT_S, f"the agent took {took:.1f} s to stop after SIGINT:\n{rest[-3000:]}"
