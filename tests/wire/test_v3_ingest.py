"""The Prometheus ingest publishes version 3 with the agent's encoder when its config says so (``publish.wire``),
and what it publishes reads back, through the worker's decoder and layout cache, as its own snapshots."""

from __future__ import annotations

import aiohttp
import pytest

from tailhound.ingest.service import IngestService
from tailhound.settings import Settings
from tailhound.snapshot import Snapshot
from tailhound.streams.codec import decode_message
from tailhound.wire import is_v3, snapshot_json
from tailhound.wire.v3_decode import LayoutCache
from tests.ingest.test_service import CAPTURE, FIXTURES, offline_snapshots, post, service_config
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker]


async def test_the_ingest_publishes_version_3_that_reads_back_as_its_snapshots(settings: Settings):
    service = IngestService(settings, service_config(publish={"linger_ms": 0, "wire": 3, "layout_every_s": 300}))
    await service.start()
    try:
        async with aiohttp.ClientSession() as session:
            for entry in CAPTURE["requests"]:
                status, _h, _t = await post(
                    session, service.port, (FIXTURES / entry["file"]).read_bytes(), entry["headers"]
                )
                assert status == 204
    finally:
        await service.stop()
    expected = offline_snapshots()
    records = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= len(expected), timeout=30)
    assert all(is_v3(r.value) for r in records)
    cache = LayoutCache()
    got = [
        Snapshot.model_validate_json(snapshot_json(p)) for r in records for p in decode_message(r.value, layouts=cache)
    ]
    assert sorted(got, key=lambda s: (s.node, s.source, s.ts)) == sorted(
        expected, key=lambda s: (s.node, s.source, s.ts)
    )
