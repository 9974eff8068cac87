"""What a real Prometheus' /federate answers per GPU node, for the federation pull's default bounds
(``ingest.federation.max_body_bytes`` and ``max_series``): Debian's Prometheus scrapes N made-up nodes, each
an 8-GPU dcgm-exporter (the real dcgm-exporter 3.x page of tests/agents/fixtures/dcgm_exporter_3x.prom, its
GPU repeated 8 times), a vLLM engine (tests/agents/fixtures/vllm_v1.prom) and this machine's real
node_exporter page; then the puller (the catalog's derived match[]) pulls /federate. Prints body bytes and
series per node, and the CPU seconds of a pull per 1,000 nodes.

    .venv/bin/python -m bench.federation_body [--nodes 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tailhound.ingest.federation import FederationConfig, FederationPuller  # noqa: E402
from tailhound.ingest.federation_text import parse_federate  # noqa: E402
from tests.exporters import start_node_exporter  # noqa: E402
from tests.ingest.prometheus_proc import Prometheus, page_jobs  # noqa: E402

FIXTURES = ROOT / "tests" / "agents" / "fixtures"
GPUS = 8


def dcgm_page(gpus: int = GPUS) -> str:
    """The real one-GPU dcgm-exporter 3.x page with its GPU's samples repeated for `gpus` GPUs."""
    out = []
    for line in (FIXTURES / "dcgm_exporter_3x.prom").read_text().splitlines():
        if line.startswith("#") or 'gpu="' not in line:
            out.append(line)
            continue
        for g in range(gpus):
            line_g = re.sub(r'gpu="\d+"', f'gpu="{g}"', line)
            line_g = re.sub(r'device="nvidia\d+"', f'device="nvidia{g}"', line_g)
            out.append(re.sub(r'UUID="GPU-([0-9a-f-]+)"', lambda m, g=g: f'UUID="GPU-{g:02d}{m.group(1)[2:]}"', line_g))
    return "\n".join(out) + "\n"


async def main(nodes: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="fed-bench-"))
    node_exporter = start_node_exporter(workdir / "node")
    try:
        node_page = urllib.request.urlopen(node_exporter.url + "/metrics", timeout=10).read().decode()
    finally:
        node_exporter.stop()
    pages = {"dcgm": dcgm_page(), "vllm": (FIXTURES / "vllm_v1.prom").read_text(), "node": node_page}

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=pages[request.match_info["job"]], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{node}/{job}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    names = [f"gpu-node-{i}" for i in range(nodes)]
    config = "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:" + page_jobs(
        port, names, jobs=("dcgm", "vllm", "node")
    )
    prometheus = Prometheus(workdir / "prometheus", config)
    await prometheus.start()
    puller = FederationPuller(
        FederationConfig(url=prometheus.url, timeout_s=30, max_body_bytes=1 << 30, max_series=10_000_000)
    )
    try:
        await asyncio.sleep(8)  # a few scrapes of every target
        body = await puller.fetch()
        parsed = parse_federate(body, 1)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        emitted = await puller.pull_once()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        await puller.close()
        await prometheus.stop()
        await runner.cleanup()
    per_job = {job: sum(1 for s in parsed.series if ("job", job) in s.labels) // nodes for job in pages}
    return {
        "nodes": nodes,
        "gpus_per_node": GPUS,
        "body_bytes": len(body),
        "series": len(parsed.series),
        "bytes_per_node": round(len(body) / nodes),
        "series_per_node": round(len(parsed.series) / nodes),
        "series_per_node_by_job": per_job,
        "snapshots": len(emitted.snapshots),
        "pull_cpu_s_per_1000_nodes": round(cpu / nodes * 1000, 2),
        "pull_wall_s_per_1000_nodes": round(wall / nodes * 1000, 2),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40)
    print(json.dumps(asyncio.run(main(ap.parse_args().nodes)), indent=2))
