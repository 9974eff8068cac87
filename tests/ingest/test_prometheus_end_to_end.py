"""End to end with Debian's real Prometheus: it scrapes dcgm-exporter (default counters) and vLLM pages of two
nodes whose GPU 3 throttles; one node reaches tailhound by remote write (the write_relabel_configs of
`tailhound ingest --prometheus-config`), the other by federation (match[] derived from the catalog); a worker
with the bundled rule pack opens the thermal incident of each node, with the hot GPU in its scope."""

from __future__ import annotations

import pytest
from aiohttp import web

from tailhound.incident import IncidentEvent
from tailhound.ingest.config import IngestServiceConfig
from tailhound.ingest.prometheus_snippet import keep_regex
from tailhound.ingest.service import IngestService
from tailhound.kafka import ensure_topics
from tailhound.settings import Settings
from tailhound.worker.process import WorkerProcess
from tests.ingest.pages import dcgm_page, vllm_page
from tests.ingest.prometheus_proc import Prometheus, page_jobs
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
RW_NODE, FED_NODE = "gpu-node-rw", "gpu-node-fed"


async def serve_pages(hot_gpu: int | None = 3) -> tuple[web.AppRunner, int]:
    scrapes: dict[tuple[str, str], int] = {}

    async def page(request: web.Request) -> web.Response:
        node, job = request.match_info["node"], request.match_info["job"]
        k = scrapes[(node, job)] = scrapes.get((node, job), -1) + 1
        text = dcgm_page(node, k, hot_gpu) if job == "dcgm" else vllm_page(k)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/{node}/{job}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def prometheus_config(pages_port: int, ingest_port: int) -> str:
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:{page_jobs(pages_port, [RW_NODE, FED_NODE])}
remote_write:
  - url: http://127.0.0.1:{ingest_port}/api/v1/write
    queue_config: {{batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}}
    metadata_config: {{send: true, send_interval: 5s}}
    write_relabel_configs:
      - source_labels: [__name__, job]
        action: keep
        regex: '{keep_regex()}'
      - source_labels: [node]
        action: keep
        regex: {RW_NODE}
"""


async def test_a_thermal_fault_opens_through_remote_write_and_through_federation(settings: Settings, tmp_path):
    await ensure_topics(settings)
    pages, pages_port = await serve_pages()
    receiver = IngestService(
        settings,
        IngestServiceConfig.model_validate(
            {"listen": "127.0.0.1:0", "remote_write": {"grouping": {"settle_s": 2}}, "publish": {"linger_ms": 0}}
        ),
    )
    await receiver.start()
    prometheus = Prometheus(tmp_path / "prometheus", prometheus_config(pages_port, receiver.port))
    puller = IngestService(
        settings,
        IngestServiceConfig.model_validate(
            {
                "listen": "",
                "federation": {"url": prometheus.url, "interval_s": 1, "matchers": {"node": FED_NODE}},
                "publish": {"linger_ms": 0},
            }
        ),
    )
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    try:
        await prometheus.start()
        await puller.start()

        def thermal_on_both(records) -> bool:
            return nodes_of(thermal(records)) >= {RW_NODE, FED_NODE}

        records = await consume(settings, settings.incidents_topic, thermal_on_both, timeout=240, alive=worker.alive)
    finally:
        await puller.stop()
        await prometheus.stop()
        await receiver.stop()
        worker.stop()
        await pages.cleanup()
    events = thermal(records)
    assert nodes_of(events) >= {RW_NODE, FED_NODE}, (
        worker.log_tail(),
        prometheus.log_tail(),
        receiver.stats(),
        puller.stats(),
    )
    opened = [e for e in events if e.event == "opened"]
    assert opened and all(e.severity == "critical" for e in opened)
    # the scope names the hot GPU of each node (on the node's incident, or on the members of a rolled-up one)
    gpus = {g for e in events for g in e.scope.gpus} | {
        g
        for e in events
        for m in getattr(e, "members", []) or []
        for g in getattr(getattr(m, "scope", None), "gpus", [])
    }
    assert gpus == {"3"}, [e.scope for e in events]
    # the receiver took every request (Prometheus got 204s) and nothing was dead-lettered
    stats = receiver.stats()
    assert stats.get("status_204", 0) > 0 and not any(k.startswith(("status_4", "rejected_")) for k in stats), stats
    assert puller.stats().get("snapshots", 0) > 0, puller.stats()


def thermal(records) -> list[IncidentEvent]:
    events = [IncidentEvent.model_validate_json(r.value) for r in records]
    return [e for e in events if e.root_cause == "gpu-thermal-throttle"]


def nodes_of(events: list[IncidentEvent]) -> set[str]:
    return {n for e in events for n in ([e.scope.node] if e.scope.node else e.scope.nodes)}
