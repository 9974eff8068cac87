"""Scraping a live Prometheus endpoint on 127.0.0.1."""

from __future__ import annotations

import pytest

from tailhound.agents.collectors import CollectError
from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget, target_node
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tests.http_helpers import FakeVllm, serve_metrics


async def test_scrape_returns_one_record_with_instance_label():
    fake = FakeVllm()
    async with serve_metrics(fake) as url:
        c = ScrapeCollector(ScrapeTarget(job="vllm", url=url, labels={"cluster": "a"}), node="gpu-1")
        try:
            [rec] = await c.collect()
            [rec2] = await c.collect()
        finally:
            await c.close()
    assert rec.job == "vllm" and rec.node == "gpu-1" and rec.interval_s == 5
    assert rec.labels == {"instance": url.split("/")[2], "cluster": "a"}
    assert "vllm:generation_tokens_total" in rec.body
    assert "text/plain;version=0.0.4" in fake.headers_seen[0]["Accept"]
    b = SnapshotBuilder()
    b.build(rec)
    [c2] = b.build(rec2).find("vllm:generation_tokens_total")
    assert c2.delta == 250


async def test_http_errors_timeouts_and_refusals_are_collect_errors():
    fake = FakeVllm(status=503)
    async with serve_metrics(fake) as url:
        c = ScrapeCollector(ScrapeTarget(job="vllm", url=url))
        with pytest.raises(CollectError, match="HTTP 503"):
            await c.collect()
        await c.close()
    c = ScrapeCollector(ScrapeTarget(job="vllm", url=url, timeout_s=0.5))  # server gone: refused
    with pytest.raises(CollectError, match="Connect"):
        await c.collect()
    await c.close()
    [failed] = c.failure_records(1.0, "boom")
    assert failed.error == "boom" and failed.labels["instance"] == url.split("/")[2]


async def test_headers_from_env_are_sent_but_missing_env_is_an_error(monkeypatch):
    fake = FakeVllm()
    async with serve_metrics(fake) as url:
        target = ScrapeTarget(job="vllm", url=url, headers_from_env={"Authorization": "TH_TEST_TOKEN"})
        c = ScrapeCollector(target)
        with pytest.raises(CollectError, match="TH_TEST_TOKEN is not set"):
            await c.collect()
        monkeypatch.setenv("TH_TEST_TOKEN", "Bearer s3cret")
        [rec] = await c.collect()
        await c.close()
    assert fake.headers_seen[-1]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in rec.to_line()


@pytest.mark.parametrize(
    ("url", "node", "expected"),
    [
        ("http://bb:9115/probe?target=https://llm.example.com/health&module=http_2xx", None, "llm.example.com"),
        ("http://bb:9115/probe?target=10.1.2.3:443&module=tcp_connect", None, "10.1.2.3"),
        ("http://bb:9115/probe?target=x.example:443", "override", "override"),
    ],
)
def test_blackbox_node_is_the_probed_target(url, node, expected):
    assert target_node(ScrapeTarget(job="blackbox", url=url, node=node), "agent-node") == expected


def test_non_blackbox_node_defaults_to_the_agent():
    assert target_node(ScrapeTarget(job="vllm", url="http://x:8000/metrics"), "gpu-7") == "gpu-7"
