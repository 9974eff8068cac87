"""SIGHUP reloads `tailhound agent` (agent.yaml) and `tailhound ingest` (ingest.yaml), real processes.

A valid new file is applied while the process keeps running (a collector added; authentication turned on);
a broken one is logged with the reason and the old config keeps running.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tailhound.broker import free_port

pytestmark = pytest.mark.broker
WAIT_S = 30.0


def _env(settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env.update(
        TAILHOUND_BROKER=settings.broker,
        TAILHOUND_TOPIC_PREFIX=settings.topic_prefix,
        TAILHOUND_PARTITIONS=str(settings.partitions),
    )
    return env


def _hup(proc: subprocess.Popen, log: Path) -> None:
    """SIGHUP once the process catches it (its readiness can answer before its handler is in: under load, or
    from another process on a port picked free a moment before): uncaught, SIGHUP ends it."""
    _until("its SIGHUP handler", lambda: _catches(proc.pid, signal.SIGHUP), proc, log)
    proc.send_signal(signal.SIGHUP)


def _catches(pid: int, sig: int) -> bool:
    """Whether `pid` has a handler for `sig` (the SigCgt mask of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _until(what: str, check: Callable[[], bool], proc: subprocess.Popen, log: Path) -> None:
    """Poll `check` (bounded: WAIT_S) while `proc` is alive."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the process exited ({proc.returncode}) waiting for {what}:\n{log.read_text()}"
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"no {what} within {WAIT_S:.0f} s:\n{log.read_text()[-4000:]}")


def _metric(url: str, name: str) -> float:
    text = httpx.get(url, timeout=2).text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def start(tmp_path) -> Iterator[Callable[..., tuple[subprocess.Popen, Path]]]:
    procs: list[subprocess.Popen] = []

    def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"proc{len(procs)}.log"
        fh = log.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tailhound", *args],
            env=env,
            cwd=tmp_path,
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        return proc, log

    yield _start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_sighup_reloads_the_agent_config_and_keeps_the_old_one_when_broken(settings, tmp_path, start):
    port = free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    cfg = tmp_path / "agent.yaml"
    base = f"node: reload-node\nlisten: 127.0.0.1:{port}\nprocnet:\n  interval_s: 0.5\n"
    cfg.write_text(base, encoding="utf-8")
    proc, log = start(["agent", "-c", str(cfg)], _env(settings))
    metrics = f"http://127.0.0.1:{port}/metrics"
    node = 'tailhound_agent_collections_total{job="node"}'
    probe = 'tailhound_agent_collections_total{job="netprobe"}'
    _until("node collections", lambda: _metric(metrics, node) > 0, proc, log)
    assert _metric(metrics, probe) == 0

    cfg.write_text(
        base + "tcp_connect:\n  interval_s: 0.5\n  targets:\n"
        f"    - {{name: loop, host: 127.0.0.1, port: {listener.getsockname()[1]}}}\n",
        encoding="utf-8",
    )
    _hup(proc, log)
    _until("the added tcp_connect collector", lambda: _metric(metrics, probe) > 0, proc, log)
    assert _metric(metrics, 'tailhound_agent_config_reloads_total{result="success"}') == 1

    cfg.write_text(base + "tcp_connect: {targets: []}\nnot_a_key: 1\n", encoding="utf-8")
    _hup(proc, log)
    _until(
        "the rejected reload",
        lambda: _metric(metrics, 'tailhound_agent_config_reloads_total{result="failure"}') == 1,
        proc,
        log,
    )
    before = _metric(metrics, probe)
    _until("collections of the old config", lambda: _metric(metrics, probe) > before, proc, log)
    assert _metric(metrics, "tailhound_agent_config_last_reload_successful") == 0
    text = log.read_text()
    assert "agent config reload (SIGHUP) rejected, the running config stays" in text
    assert re.search(rf"{re.escape(str(cfg))}:5:\d+: tcp_connect\.targets", text)  # where the loader found it
    listener.close()


def test_sighup_reloads_the_ingest_config_and_keeps_the_old_one_when_broken(settings, tmp_path, start):
    port = free_port()
    cfg = tmp_path / "ingest.yaml"
    base = f"listen: 127.0.0.1:{port}\n"
    cfg.write_text(base, encoding="utf-8")
    (tmp_path / "token").write_text("s3cret\n", encoding="utf-8")
    proc, log = start(["ingest", "-c", str(cfg)], _env(settings))
    url = f"http://127.0.0.1:{port}"
    _until("the ingest's readiness", lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200, proc, log)

    def status() -> int:
        return httpx.post(f"{url}/api/v1/write", content=b"", timeout=2).status_code

    assert status() != 401
    cfg.write_text(base + f"auth:\n  bearer_token_file: {tmp_path / 'token'}\n", encoding="utf-8")
    _hup(proc, log)
    _until("authentication after the reload", lambda: status() == 401, proc, log)
    assert _metric(f"{url}/metrics", 'tailhound_ingest_config_reloads_total{result="success"}') == 1

    cfg.write_text(base + "federation: {url: 12}\nbogus: true\n", encoding="utf-8")
    _hup(proc, log)
    _until(
        "the rejected reload",
        lambda: _metric(f"{url}/metrics", 'tailhound_ingest_config_reloads_total{result="failure"}') == 1,
        proc,
        log,
    )
    assert status() == 401  # the reloaded config (with auth) still runs
    assert "ingest config reload (SIGHUP) rejected, the running config stays" in log.read_text()
