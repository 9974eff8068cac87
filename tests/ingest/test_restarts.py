"""Restarts on the remote-write path, with Debian's real Prometheus: tailhound's ingest stops (SIGTERM's path:
the server closes, open scrapes are published, the outbox flushed) and comes back on the same port while
Prometheus keeps scraping and retrying; then Prometheus itself restarts (SIGTERM: it flushes its queues) on
the same storage. Every scrape Prometheus stored reaches the telemetry topic as a snapshot."""

from __future__ import annotations

import asyncio

import pytest

from tailhound.ingest.config import IngestServiceConfig
from tailhound.ingest.service import IngestService
from tailhound.kafka import ensure_topics
from tailhound.settings import Settings
from tailhound.wire import read_telemetry
from tests.ingest.capture_fixture import free_port
from tests.ingest.prometheus_proc import Prometheus, page_jobs
from tests.ingest.test_prometheus_end_to_end import serve_pages
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
NODE = "gpu-node-7"


def config(port: int) -> IngestServiceConfig:
    return IngestServiceConfig.model_validate(
        {
            "listen": f"127.0.0.1:{port}",
            "poll_s": 0.2,
            "remote_write": {"grouping": {"settle_s": 2}},
            "publish": {"linger_ms": 0},
        }
    )


def prometheus_config(pages_port: int, port: int) -> str:
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:{page_jobs(pages_port, [NODE])}
remote_write:
  - url: http://127.0.0.1:{port}/api/v1/write
    queue_config: {{batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}}
    metadata_config: {{send: true, send_interval: 5s}}
"""


async def test_restarts_of_tailhound_and_of_prometheus_lose_no_scrape(settings: Settings, tmp_path):
    await ensure_topics(settings)
    pages, pages_port = await serve_pages(hot_gpu=None)
    port = free_port()
    ingest = IngestService(settings, config(port))
    await ingest.start()
    prometheus = Prometheus(tmp_path / "prometheus", prometheus_config(pages_port, port))
    stats: list[dict[str, int]] = []
    try:
        await prometheus.start()
        await asyncio.sleep(9)  # Prometheus' scrape manager starts ~5 s after ready
        await ingest.stop()  # tailhound away for 5 s: Prometheus' sends fail and are retried
        stats.append(ingest.stats())
        await asyncio.sleep(5)
        ingest = IngestService(settings, config(port))
        await ingest.start()
        await asyncio.sleep(6)
        await prometheus.stop()  # flushes its queues
        await asyncio.sleep(1)
        await prometheus.start()  # same storage: its WAL is replayed, remote write goes on
        await asyncio.sleep(10)
        stored = {job: await prometheus.query(f'up{{job="{job}"}}[2m]') for job in ("dcgm", "vllm")}
        await prometheus.stop()
    finally:
        await prometheus.stop()
        await ingest.stop()
        stats.append(ingest.stats())
        await pages.cleanup()
    scraped = {
        job: {round(float(ts) * 1000) for ts, up in rows[0]["values"] if up == "1"} for job, rows in stored.items()
    }
    want = sum(len(v) for v in scraped.values())
    assert min(len(v) for v in scraped.values()) >= 18, {j: len(v) for j, v in scraped.items()}
    records = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= want, timeout=30)
    snapshots = read_telemetry(r.value for r in records)
    published = {job: [round(s.ts * 1000) for s in snapshots if s.source == job and s.node == NODE] for job in scraped}
    for job, stamps in scraped.items():
        missing = sorted(stamps - set(published[job]))
        assert not missing, (job, missing, sorted(published[job]), stats, prometheus.log_tail())
    # a batch Prometheus resent after the restart may repeat a scrape: the worker ignores a snapshot it saw
    repeats = sum(len(v) - len(set(v)) for v in published.values())
    assert repeats <= 2, (repeats, stats)
    assert stats[0].get("status_204", 0) > 0 and stats[1].get("status_204", 0) > 0, stats
