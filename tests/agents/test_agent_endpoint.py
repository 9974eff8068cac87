"""The agent's endpoint: /-/healthy, /-/ready (every collector ran once, outbox not full) and /metrics with the
process's own metrics, in the same probe format as every other tailhound process."""

from __future__ import annotations

import aiohttp

from tailhound.agents.collectors import CollectorUnavailable
from tailhound.agents.config import AgentConfig
from tailhound.agents.metrics import AgentMetrics, bound_port, serve_metrics
from tailhound.agents.runtime import Agent
from tests.agents.test_runtime import Scripted
from tests.tailhound.test_self_metrics import promtool_ok


class Off(Scripted):
    job = "nvml"

    async def collect(self):
        raise CollectorUnavailable("no NVIDIA driver on this host")


async def _get(session: aiohttp.ClientSession, base: str, path: str) -> tuple[int, str]:
    async with session.get(base + path) as r:
        return r.status, await r.text()


async def test_ready_once_every_collector_ran_and_while_the_outbox_is_not_full():
    metrics = AgentMetrics()
    runner = await serve_metrics(metrics, "127.0.0.1:0")
    base = f"http://127.0.0.1:{bound_port(runner)}"
    try:
        async with aiohttp.ClientSession() as session:
            assert await _get(session, base, "/-/healthy") == (200, "tailhound agent is Healthy.\n")
            status, body = await _get(session, base, "/-/ready")
            assert status == 503 and body == "tailhound agent is not ready: collectors not started\n"
            node, off = Scripted([1, 2]), Off([])
            agent = Agent(AgentConfig(listen=None), lambda _s: None, metrics=metrics, collectors=[node, off])
            await agent.collect_once(off)  # a collector that turned itself off counts as settled
            status, body = await _get(session, base, "/-/ready")
            assert status == 503 and "first collection of node" in body
            await agent.collect_once(node)
            assert await _get(session, base, "/-/ready") == (200, "tailhound agent is Ready.\n")
            metrics.outbox_fill.set(1.0)  # what the sender sets when the broker does not keep up
            status, body = await _get(session, base, "/-/ready")
            assert status == 503 and "outbox full" in body
            metrics.outbox_fill.set(0.4)
            assert (await _get(session, base, "/-/ready"))[0] == 200
            status, text = await _get(session, base, "/metrics")
    finally:
        await runner.cleanup()
    assert status == 200
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "python_info",
        "python_gc_collections_total",
        "tailhound_agent_collections_total",
    ):
        assert f"\n{name}" in text, name
    promtool_ok(text)


def test_process_metrics_are_registered_once_per_registry():
    from prometheus_client import generate_latest

    from tailhound.endpoints import add_process_metrics

    m = AgentMetrics()
    add_process_metrics(m.registry)  # the worker's notifier API and its endpoint share one registry
    assert generate_latest(m.registry).decode().count("# TYPE process_start_time_seconds") == 1
