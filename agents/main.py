"""Entry points behind ``tailhound agent`` and ``tailhound record`` (the CLI stays thin)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from pathlib import Path

from tailhound.agents.buffer import Outbox
from tailhound.agents.config import AgentConfig, load_agent_config
from tailhound.agents.metrics import AgentMetrics, serve_metrics
from tailhound.agents.runtime import Agent, replay
from tailhound.agents.sender import SnapshotSender
from tailhound.config_reload import ConfigReloader, restart_only_changes
from tailhound.errors import TailhoundError
from tailhound.kafka import ensure_topics
from tailhound.recording import open_for_writing, read_records, require_records
from tailhound.settings import Settings

log = logging.getLogger("tailhound.agent")

#: agent.yaml keys a reload cannot change in a running agent (its endpoint and its publisher)
RESTART_ONLY = ("listen", "publish")

#: Allocations (minus frees) between young-generation collections while the agent runs (default 700).
GC_THRESHOLD = 10_000


def make_sender(settings: Settings, config: AgentConfig, metrics: AgentMetrics) -> SnapshotSender:
    p = config.publish
    outbox = Outbox(
        max_messages=p.buffer.max_messages,
        max_bytes=p.buffer.max_bytes,
        spill_file=p.buffer.spill_file,
        spill_max_bytes=p.buffer.spill_max_bytes,
    )
    return SnapshotSender(
        settings,
        outbox,
        metrics,
        batch_max=p.batch_max,
        linger_ms=p.linger_ms,
        compression=None if p.compression == "none" else p.compression,
        request_timeout_s=p.request_timeout_s,
        bundle=p.bundles,
        wire=p.wire,
        layout_every_s=p.layout_every_s,
    )


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


def _require_broker(settings: Settings) -> None:
    if not settings.broker:
        raise TailhoundError(
            "the agent publishes to a running broker: set TAILHOUND_BROKER=kafka://host:9092 "
            "(or use `tailhound record` to write a recording without one)"
        )


def config_reloader(path: Path, agent: Agent, metrics: AgentMetrics) -> ConfigReloader[AgentConfig]:
    """SIGHUP: read `path` again and swap the collectors; the outbox, endpoint and publisher stay."""

    async def apply(new: AgentConfig) -> None:
        stays = restart_only_changes(agent.config, new, RESTART_ONLY)
        if stays:
            log.warning("agent.yaml: %s changed: kept as started until the agent restarts", ", ".join(stays))
            new = new.model_copy(update={f: getattr(agent.config, f) for f in stays})
        await agent.reconfigure(new)
        log.info("agent %s: %d collector(s) after reload", agent.node, len(agent.collectors))

    return ConfigReloader(
        path, load_agent_config, apply, prefix="tailhound_agent", registry=metrics.registry, what="agent config"
    )


async def run_agent(
    settings: Settings,
    config: AgentConfig,
    duration_s: float | None = None,
    stop: asyncio.Event | None = None,
    config_path: Path | None = None,
) -> AgentMetrics:
    """Collect and publish until SIGINT/SIGTERM (or `duration_s`); SIGHUP reloads `config_path`."""
    _require_broker(settings)
    with contextlib.suppress(ValueError):  # until the reload handler is installed, a SIGHUP must not kill us
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    metrics = AgentMetrics()
    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ensure_topics(settings), timeout=10)  # the broker may be down at start: buffer
    sender = make_sender(settings, config, metrics)
    await sender.start()
    runner = await serve_metrics(metrics, config.listen) if config.listen else None
    agent = Agent(config, sender.enqueue, metrics=metrics)
    reloader = config_reloader(config_path, agent, metrics) if config_path is not None else None
    if reloader is not None:
        reloader.on_sighup()
    log.info("agent %s: %d collector(s) -> %s", agent.node, len(agent.collectors), settings.telemetry_topic)
    # Everything imported so far lives as long as the process: keep it out of the collector's full
    # scans, which otherwise walk ~10^5 module objects for every few thousand samples parsed.
    gc.collect()
    gc.freeze()
    # A collection allocates thousands of short-lived, acyclic objects (samples, label dicts) that
    # reference counting frees; at the default threshold (700) the young generation is scanned ~10
    # times per 8-GPU NVML collection while they are alive (~8% of its cost). Cyclic garbage waits a
    # little longer instead (kilobytes).
    gc.set_threshold(GC_THRESHOLD, 10, 10)
    try:
        await agent.run(stop, duration_s)
    finally:
        if reloader is not None:
            reloader.off_sighup()
        await sender.stop()
        if runner is not None:
            await runner.cleanup()
    return metrics


async def run_record(
    config: AgentConfig, out: Path, duration_s: float | None = None, stop: asyncio.Event | None = None
) -> int:
    """Collect like the agent, but write a scrape recording instead of publishing."""
    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    with open_for_writing(out) as fh:
        agent = Agent(config, None, recorder=fh)
        await agent.run(stop, duration_s)
        return agent.records


async def run_replay(settings: Settings, recording: Path, speed: float, config: AgentConfig | None = None) -> int:
    """Publish a recording's snapshots (``tailhound agent --from-recording``)."""
    _require_broker(settings)
    config = config or AgentConfig(listen=None)
    metrics = AgentMetrics()
    await ensure_topics(settings)
    sender = make_sender(settings, config, metrics)
    await sender.start()
    try:
        n = await replay(read_records(recording), sender.enqueue, speed)
        require_records(n, [recording])
        if not await sender.flush(timeout_s=120):
            raise TailhoundError(f"the broker did not take {len(sender.outbox)} snapshot(s) within 120 s")
        return n
    finally:
        await sender.stop(flush_timeout_s=0)
