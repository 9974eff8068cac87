"""Debian's real Prometheus on loopback for the end-to-end tests: start, stop (SIGTERM: it flushes its
remote-write queues), restart on the same storage, and its HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import aiohttp

from tests.conftest import require_tool
from tests.ingest.capture_fixture import free_port

INSTALL = "apt-get install prometheus (Debian; `make test` does it as root)"


def page_jobs(pages_port: int, nodes: list[str], jobs: tuple[str, ...] = ("dcgm", "vllm")) -> str:
    """scrape_configs entries: one job per exporter, one target per node (/<node>/<job>), target label node."""
    out = []
    for job in jobs:
        targets = "".join(
            f"""
      - targets: ["127.0.0.1:{pages_port}"]
        labels: {{node: {node}, __metrics_path__: /{node}/{job}}}"""
            for node in nodes
        )
        out.append(f"""
  - job_name: {job}
    static_configs:{targets}""")
    return "".join(out)


class Prometheus:
    def __init__(self, workdir: Path, config: str) -> None:
        self.binary = require_tool("prometheus", INSTALL)
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(config)
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.starts += 1
        log = (self.workdir / f"prometheus-{self.starts}.log").open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            self.binary,
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info",
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        async with aiohttp.ClientSession() as session:
            for _ in range(200):  # bounded: 20 s
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{self.url}/-/ready") as r:
                        if r.status == 200:
                            return
                if self.proc.returncode is not None:
                    break
                await asyncio.sleep(0.1)
        raise RuntimeError("prometheus did not become ready:\n" + self.log_tail())

    async def stop(self) -> None:
        """SIGTERM (Prometheus flushes its remote-write queues for up to its flush deadline), SIGKILL after 20 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def query(self, promql: str) -> list[dict]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{self.url}/api/v1/query", params={"query": promql}, timeout=aiohttp.ClientTimeout(total=10)
            ) as r,
        ):
            body = await r.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def log_tail(self, n: int = 3000) -> str:
        logs = sorted(self.workdir.glob("prometheus-*.log"))
        return "".join(p.read_text(errors="replace")[-n:] for p in logs[-2:])
