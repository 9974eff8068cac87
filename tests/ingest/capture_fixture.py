"""Capture real Prometheus remote-write request bodies for tests/ingest/fixtures (run by hand).

Starts, all on 127.0.0.1 with free ports and a temporary directory:

- an HTTP server serving two pages in the format of the repository's fixtures: ``/dcgm``
  (tests/agents/fixtures/dcgm_exporter.prom) and ``/vllm`` (tests/agents/fixtures/vllm_v1.prom), their
  counters and histograms growing at every scrape; the vLLM page loses one series from its 4th scrape on,
  answers 503 on its 6th and 7th scrapes (Prometheus then writes ``up 0`` and stale markers) and comes back
  "restarted" (lower counters) from its 8th;
- a remote-write receiver that saves every request body as it came (``NNN.bin``) and lists them, with the
  headers Prometheus sent and what each holds, in ``capture.json``;
- Debian's ``prometheus`` (``/usr/bin/prometheus``, 2.42 on Debian 12) scraping both pages every second and
  remote-writing to the receiver (the config is written to ``prometheus.yml`` next to the bodies).

It stops when the vLLM page has been scraped 11 times and Prometheus has sent metadata (at most
``--timeout`` seconds), then stops Prometheus (SIGTERM, SIGKILL after 10 s).

    .venv/bin/python tests/ingest/capture_fixture.py --out /tmp/capture   # the venv's editable tailhound
    # then copy the bodies, capture.json and prometheus.yml to tests/ingest/fixtures/ (see its README.md)

``--probe-retries`` answers one data request with 429 and a later one with 503 (both with
``Retry-After: 1``) and records whether Prometheus sends the same body again: what back-pressure status
Prometheus honours. Such a capture has a batch missing (Prometheus drops the one answered 429): it is kept
apart, in tests/ingest/fixtures/probe/. tests/ingest/test_capture.py runs the script (a slow test).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

from aiohttp import web

from tailhound.agents.exposition import parse_exposition
from tailhound.ingest.remote_write import RemoteWriteError, decode_write_request

ROOT = Path(__file__).resolve().parents[2]

PAGES = {"dcgm": ROOT / "tests/agents/fixtures/dcgm_exporter.prom", "vllm": ROOT / "tests/agents/fixtures/vllm_v1.prom"}
NODE = "gpu-node-2"
SCRAPES = 11  # vLLM scrapes to capture
VLLM_DOWN = (5, 6)  # scrape indexes (from 0) answered 503
VLLM_DROP_FROM = 3  # from this scrape on the vLLM page lacks the finished_reason="length" series
VLLM_RESTART = 7  # from this scrape on the vLLM counters start over (an engine restart)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def grow(text: str, steps: int, restarted: bool = False, leave_out: str | None = None) -> str:
    """Exposition `text` with its counters and histograms grown by `steps` scrapes: counters +100, buckets and
    counts +2, sums +0.25 a scrape; `restarted`: from a thousandth of the values (an engine restart: every
    counter lower than before). Lines containing `leave_out` are left out."""
    growing = {f.name for f in parse_exposition(text) if f.type in ("counter", "histogram")}
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            out.append(line)
            continue
        if leave_out is not None and leave_out in line:
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0]
        base = next((b for b in growing if name == b or name.startswith(b + "_")), None)
        if base is not None and not name.endswith("_created"):
            v = float(value) / 1000 if restarted else float(value)
            if name.endswith("_sum"):
                v += 0.25 * steps
            elif name.endswith(("_bucket", "_count")):
                v += 2 * steps
            else:
                v += 100 * steps
            value = repr(v)
        out.append(f"{head} {value}")
    return "\n".join(out) + "\n"


def page(job: str, k: int) -> str:
    """The page of `job` at scrape `k` (from 0), as the capture served it (None: answered 503)."""
    text = PAGES[job].read_text()
    if job != "vllm":
        return grow(text, k)
    leave_out = 'finished_reason="length"' if k >= VLLM_DROP_FROM else None
    if k >= VLLM_RESTART:
        return grow(text, k - VLLM_RESTART, restarted=True, leave_out=leave_out)
    return grow(text, k, leave_out=leave_out)


def prometheus_config(pages_port: int, receiver_port: int) -> str:
    jobs = "".join(
        f"""
  - job_name: {job}
    metrics_path: /{job}
    static_configs:
      - targets: ["127.0.0.1:{pages_port}"]
        labels:
          node: {NODE}
"""
        for job in PAGES
    )
    return f"""# written by tests/ingest/capture_fixture.py
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  external_labels:
    cluster: lab
scrape_configs:{jobs}
remote_write:
  - url: http://127.0.0.1:{receiver_port}/api/v1/write
    queue_config:
      batch_send_deadline: 1s
      max_shards: 1
      min_backoff: 100ms
      max_backoff: 1s
    metadata_config:
      send: true
      send_interval: 2s
"""


def describe(body: bytes) -> dict:
    try:
        req = decode_write_request(body)
    except RemoteWriteError as exc:
        return {"error": f"{exc.reason}: {exc.message}"}
    jobs: dict[str, int] = {}
    stamps: set[int] = set()
    for s in req.series:
        job = dict(s.labels).get("job", "")
        jobs[job] = jobs.get(job, 0) + 1
        stamps.update(ts for ts, _ in s.samples)
        stamps.update(s.stale)
    return {
        "series": len(req.series),
        "samples": req.sample_count,
        "stale_markers": sum(len(s.stale) for s in req.series),
        "metadata": len(req.metadata),
        "jobs": jobs,
        "timestamps_ms": sorted(stamps),
    }


async def capture(out: Path, timeout: float, probe_retries: bool, prometheus: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    scrapes = {job: 0 for job in PAGES}
    index: list[dict] = []
    seen: dict[str, int] = {}  # body sha256 -> index of its first arrival
    probes = {"429": None, "503": None}
    done = asyncio.Event()

    async def serve_page(request: web.Request) -> web.Response:
        job = request.match_info["job"]
        if job not in PAGES:
            raise web.HTTPNotFound()
        k = scrapes[job]
        scrapes[job] = k + 1
        if job == "vllm" and k in VLLM_DOWN:
            return web.Response(status=503, text="engine unavailable\n")
        return web.Response(text=page(job, k), content_type="text/plain", charset="utf-8", headers={"X-Scrape": str(k)})

    async def receive(request: web.Request) -> web.Response:
        body = await request.content.read(16 << 20)
        info = describe(body)
        digest = hashlib.sha256(body).hexdigest()
        entry = {
            "file": f"{len(index):03d}.bin",
            "received": round(time.time(), 3),
            "bytes": len(body),
            "sha256": digest,
            "headers": {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")},
            "resent_of": seen.get(digest),
            **info,
        }
        seen.setdefault(digest, len(index))
        status = 204
        if probe_retries and info.get("series"):
            data_requests = sum(1 for e in index if e.get("series"))
            for code, nth in (("429", 4), ("503", 7)):
                if probes[code] is None and data_requests == nth:
                    probes[code] = len(index)
                    status = int(code)
        entry["answered"] = status
        index.append(entry)
        (out / entry["file"]).write_bytes(body)
        if scrapes["vllm"] >= SCRAPES and any(e.get("metadata") for e in index):
            done.set()
        if status != 204:
            return web.Response(status=status, headers={"Retry-After": "1"}, text="busy\n")
        return web.Response(status=204)

    app = web.Application(client_max_size=16 << 20)
    app.router.add_get("/{job}", serve_page)
    app.router.add_post("/api/v1/write", receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    pages_port, receiver_port = free_port(), free_port()
    await web.TCPSite(runner, "127.0.0.1", pages_port).start()
    if receiver_port != pages_port:
        await web.TCPSite(runner, "127.0.0.1", receiver_port).start()
    config = prometheus_config(pages_port, receiver_port)
    (out / "prometheus.yml").write_text(config)
    version = ""
    with contextlib.suppress(OSError):
        probe = await asyncio.create_subprocess_exec(
            prometheus, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        version = (await asyncio.wait_for(probe.communicate(), 10))[0].decode().splitlines()[0]
    with tempfile.TemporaryDirectory(prefix="th-prom-") as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(config)
        log = (out / "prometheus.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            prometheus,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp}/data",
            f"--web.listen-address=127.0.0.1:{free_port()}",
            "--log.level=info",
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout)
            await asyncio.sleep(3 if done.is_set() else 0)  # the last scrapes' batches
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
            log.close()
            await runner.cleanup()
    summary = {
        "prometheus": version,
        "config": "prometheus.yml",
        "scrapes": scrapes,
        "completed": done.is_set(),
        "probes": {
            code: (
                None
                if i is None
                else {"request": index[i]["file"], "resent_as": [e["file"] for e in index if e["resent_of"] == i]}
            )
            for code, i in probes.items()
        }
        if probe_retries
        else None,
        "requests": index,
    }
    (out / "capture.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "requests"}, indent=1))
    print(f"{len(index)} requests saved in {out}")
    return 0 if done.is_set() else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the bodies and capture.json")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the scrapes (default 60)")
    ap.add_argument("--probe-retries", action="store_true", help="answer one request 429 and one 503")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    args = ap.parse_args()
    return asyncio.run(capture(args.out, min(args.timeout, 600.0), args.probe_retries, args.prometheus))


if __name__ == "__main__":
    raise SystemExit(main())
