"""Several streams workers of one consumer group as child processes (issue 16's tests and drills): each with
its own data directory, log and endpoint port, all with the same app id (so Kafka spreads the partitions over
them), started and awaited until every one is ready (``/-/ready``: partitions assigned, tables recovered)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

from tailhound.settings import Settings
from tailhound.worker.process import WorkerProcess

_PORT = re.compile(r"worker endpoint on 127\.0\.0\.1:(\d+)")


class WorkerGroup:
    """`n` workers named w0, w1 ...; ``settings.streams.web_listen`` must take a free port (``127.0.0.1:0``)."""

    def __init__(self, settings: Settings, tmp_path: Path, n: int, *, max_restarts: int = 5) -> None:
        self.settings = settings
        self.tmp_path = tmp_path
        self.workers: list[WorkerProcess] = [self._make(i, max_restarts) for i in range(n)]

    def _make(self, i: int, max_restarts: int) -> WorkerProcess:
        s = self.settings.model_copy(deep=True)
        s.streams.data_dir = self.tmp_path / f"w{i}" / "streams"
        return WorkerProcess(s, self.tmp_path / f"w{i}.log", max_restarts=max_restarts)

    def start(self) -> None:
        for w in self.workers:
            w.start()

    def add(self) -> WorkerProcess:
        """One more worker joins the group (started now)."""
        w = self._make(len(self.workers), 5)
        self.workers.append(w)
        w.start()
        return w

    def stop(self) -> None:
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            w.stop()

    def supervise(self) -> None:
        for w in self.workers:
            w.supervise()

    def logs(self) -> str:
        return "\n".join(w.log_path.read_text(errors="replace") for w in self.workers if w.log_path.exists())

    def log_tails(self, lines: int = 12) -> str:
        return "\n".join(f"--- {w.log_path.name}\n{w.log_tail(lines)}" for w in self.workers)

    async def ready(self, timeout: float = 90.0, workers: list[WorkerProcess] | None = None) -> float:
        """Wait until every worker (or those given) answers ``/-/ready`` with 200 at the same time; seconds."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        pending = list(workers or self.workers)
        while time.monotonic() < deadline:
            states = [await asyncio.to_thread(_ready, w) for w in pending]
            if all(states):
                return time.monotonic() - t0
            await asyncio.sleep(0.5)
        raise AssertionError(f"workers not ready within {timeout:.0f} s\n{self.log_tails()}")


def port_of(worker: WorkerProcess) -> int | None:
    """The endpoint port of the worker's latest start (from its log)."""
    with contextlib.suppress(OSError):
        found = _PORT.findall(worker.log_path.read_text(errors="replace"))
        return int(found[-1]) if found else None
    return None


def _ready(worker: WorkerProcess) -> bool:
    port = port_of(worker)
    if port is None or not worker.alive():
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False
