"""The long-running commands write nothing in the directory they are started from (README: nothing is
written where the user did not name): worker, agent, ingest, notifier run, demo and replay each run as a real
process from an empty directory, HOME a temporary one, until they serve (or finish), then stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tailhound.broker import free_port

pytestmark = [pytest.mark.broker, pytest.mark.slow]
WAIT_S = 60.0


def _ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_long_running_commands_write_nothing_in_an_empty_cwd(settings, tmp_path):
    cwd, home, named = tmp_path / "cwd", tmp_path / "home", tmp_path / "named"
    for d in (cwd, home, named):
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / ".local/state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        TAILHOUND_BROKER=settings.broker,
        TAILHOUND_TOPIC_PREFIX=settings.topic_prefix,
        TAILHOUND_PARTITIONS=str(settings.partitions),
    )
    ports = {k: free_port() for k in ("worker", "agent", "ingest", "notifier")}
    (named / "agent.yaml").write_text(f"node: n1\nlisten: 127.0.0.1:{ports['agent']}\nprocnet: {{interval_s: 1}}\n")
    (named / "ingest.yaml").write_text(f"listen: 127.0.0.1:{ports['ingest']}\n")
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailhound",
            "simulate",
            "--minutes",
            "3",
            "--nodes",
            "1",
            "--record",
            str(named / "rec.jsonl"),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    # each: (args, extra env, the URL that answers 200 once it serves; None: runs to its end)
    runs = {
        "worker": (
            ["worker"],
            {
                "TAILHOUND_STREAMS__WEB_LISTEN": f"127.0.0.1:{ports['worker']}",
                "TAILHOUND_STREAMS__APP_ID": f"{settings.streams.app_id}-cwd",
                "TAILHOUND_NOTIFIER__API_LISTEN": "",
            },
            f"http://127.0.0.1:{ports['worker']}/-/ready",
        ),
        "agent": (["agent", "-c", str(named / "agent.yaml")], {}, f"http://127.0.0.1:{ports['agent']}/metrics"),
        "ingest": (["ingest", "-c", str(named / "ingest.yaml")], {}, f"http://127.0.0.1:{ports['ingest']}/-/ready"),
        "notifier run": (
            ["notifier", "run"],
            {"TAILHOUND_NOTIFIER__API_LISTEN": f"127.0.0.1:{ports['notifier']}"},
            f"http://127.0.0.1:{ports['notifier']}/-/healthy",
        ),
        "demo": (["demo", "--minutes", "1", "--nodes", "1", "--console", ""], {}, None),
        "replay": (["replay", str(named / "rec.jsonl"), "--out", str(named / "incidents.jsonl")], {}, None),
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "tailhound", *args],
            cwd=cwd,
            env={**env, **extra},
            stdout=subprocess.DEVNULL,
            stderr=(named / f"{name}.log").open("w"),
        )
        for name, (args, extra, _url) in runs.items()
    }
    try:
        deadline = time.monotonic() + WAIT_S
        waiting = {name for name, (_a, _e, url) in runs.items() if url is not None}
        while waiting and time.monotonic() < deadline:
            for name in sorted(waiting):
                assert procs[name].poll() is None, f"{name} exited: {(named / f'{name}.log').read_text()[-3000:]}"
                if _ready(runs[name][2]):
                    waiting.discard(name)
            time.sleep(0.3)
        assert not waiting, f"not serving within {WAIT_S:.0f} s: {sorted(waiting)}"
        assert procs["replay"].wait(timeout=WAIT_S) == 0, (named / "replay.log").read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert sorted(p.relative_to(cwd).as_posix() for p in cwd.rglob("*")) == []
    assert (named / "incidents.jsonl").is_file()
