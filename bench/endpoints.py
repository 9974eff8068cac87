"""Local endpoints the benchmarked agent collects from: the same shapes as production sources."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from aiohttp import web

from tailhound.agents.render import render_samples
from tailhound.agents.simulator import FleetSimulator, SimConfig
from tests.agents.sse_servers import ServerSpec, serve

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "agents" / "fixtures"

STUB_STATUS = (
    "Active connections: 291 \nserver accepts handled requests\n 16630948 16630948 31070465 \n"
    "Reading: 6 Writing: 179 Waiting: 106 \n"
)


class SimulatedNode:
    """Serves one simulated GPU node's vLLM and dcgm-exporter pages, advancing one tick per vLLM scrape."""

    def __init__(self) -> None:
        self.sim = FleetSimulator(SimConfig(nodes=1, seed=3, interval_s=1.0))
        self.ticks = self.sim.run(24 * 3600)
        self.pages: dict[str, str] = {}
        self.advance()

    def advance(self) -> None:
        _ts, snaps = next(self.ticks)
        self.pages = {s.source: render_samples(s.samples) for s in snaps}


@asynccontextmanager
async def serve_endpoints():
    """Yields a dict of URLs: vllm, dcgm, node, blackbox, nginx, stream (base URL), tcp (host:port)."""
    node = SimulatedNode()

    async def vllm(_r):
        node.advance()
        return web.Response(text=node.pages["vllm"], content_type="text/plain")

    async def dcgm(_r):
        return web.Response(text=node.pages["dcgm"], content_type="text/plain")

    node_exporter = (FIXTURES / "node_exporter.prom").read_text()
    blackbox = (FIXTURES / "blackbox.prom").read_text()
    app = web.Application()
    app.router.add_get("/vllm/metrics", vllm)
    app.router.add_get("/dcgm/metrics", dcgm)
    app.router.add_get("/node/metrics", lambda _r: web.Response(text=node_exporter, content_type="text/plain"))
    app.router.add_get("/probe", lambda _r: web.Response(text=blackbox, content_type="text/plain"))
    app.router.add_get("/nginx_status", lambda _r: web.Response(text=STUB_STATUS, content_type="text/plain"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}"

    async def accept(reader, writer):
        writer.close()

    tcp = await asyncio.start_server(accept, "127.0.0.1", 0)
    tcp_port = tcp.sockets[0].getsockname()[1]
    async with AsyncExitStack() as stack:
        sse = await stack.enter_async_context(serve(ServerSpec(tokens=16, first_token_delay_s=0.05, token_gap_s=0.01)))
        try:
            yield {
                "vllm": f"{base}/vllm/metrics",
                "dcgm": f"{base}/dcgm/metrics",
                "node": f"{base}/node/metrics",
                "blackbox": f"{base}/probe?target=127.0.0.1:{port}&module=http_2xx",
                "nginx": f"{base}/nginx_status",
                "stream": sse.url,
                "tcp": f"127.0.0.1:{tcp_port}",
            }
        finally:
            tcp.close()
            await runner.cleanup()


COLLECTOR_GROUPS = {
    "nvml (8 fake GPUs, 18 NVLinks each)": ("nvml",),
    "4 scrapes (vLLM, dcgm-exporter, node_exporter, blackbox)": ("scrape",),
    "stream probe (SSE + 3 /health)": ("stream_probe",),
    "procnet + tcp_connect + hops + nginx": ("procnet", "tcp_connect", "hops", "nginx"),
}


def agent_yaml(urls: dict[str, str] | None, listen: str, spill: Path, only: tuple[str, ...] | None = None) -> str:
    """All collectors at 1 Hz (urls given), or none (the baseline: runtime, sender and /metrics only);
    `only` keeps just the named top-level collector sections (for the per-collector breakdown)."""
    head = f"node: bench-node\nlisten: {listen}\npublish: {{buffer: {{spill_file: {spill}}}}}\n"
    if urls is None:
        return head
    body = _collectors_yaml(urls)
    if only is not None:
        text, keep = [], False
        for line in body.splitlines(keepends=True):
            if line and not line[0].isspace():
                keep = line.split(":", 1)[0] in only
            if keep:
                text.append(line)
        body = "".join(text)
    return head + body


def _collectors_yaml(urls: dict[str, str]) -> str:
    host, port = urls["tcp"].split(":")
    return f"""\
scrape:
  - {{job: vllm, url: "{urls["vllm"]}", interval_s: 1}}
  - {{job: dcgm, url: "{urls["dcgm"]}", interval_s: 1}}
  - {{job: node, url: "{urls["node"]}", interval_s: 1}}
  - {{job: blackbox, url: "{urls["blackbox"]}", interval_s: 1}}
nvml: {{interval_s: 1}}
procnet: {{interval_s: 1}}
tcp_connect: {{interval_s: 1, targets: [{{name: lb, host: "{host}", port: {port}}}]}}
hops: {{interval_s: 1, cycles: 1, targets: [{{name: lb, host: "{host}"}}]}}
nginx: [{{url: "{urls["nginx"]}", worker_connections: 4096, interval_s: 1}}]
stream_probe:
  - {{endpoint: "{urls["stream"]}", name: chat, model: bench, interval_s: 1, health_samples: 3,
      lb_health_timeout_s: 2}}
"""
