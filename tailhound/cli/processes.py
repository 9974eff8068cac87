"""The long-running processes and the fleet: `demo`, `worker`, `broker`, `simulate`, `agent`, `record`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from tailhound.errors import TailhoundError
from tailhound.logs import log_start, setup_logging
from tailhound.output import LogFormatOpt, LogLevelOpt
from tailhound.progress import ProgressReporter, TickProgress

from .common import ConfigOpt, app, console, err_console, settings_from


@app.command()
def demo(
    config: ConfigOpt = None,
    speed: Annotated[float, typer.Option(help="Fleet seconds per wall second.")] = 60.0,
    minutes: Annotated[float, typer.Option(help="Minutes of fleet time to simulate.")] = 60.0,
    nodes: Annotated[int, typer.Option(min=1, max=64, help="Simulated GPU nodes.")] = 4,
    fault: Annotated[
        list[str] | None,
        typer.Option(help="Fault to inject (repeatable), e.g. thermal-throttle@20m+20m:node=gpu-node-2:gpus=3,5"),
    ] = None,
    console_listen: Annotated[
        str,
        typer.Option(
            "--console", help="Where the incident console listens (loopback host:port; port 0: any free one; '': off)."
        ),
    ] = "127.0.0.1:0",
    hold: Annotated[
        float,
        typer.Option(min=0, max=86400, help="Keep the incident console up this many seconds after the fleet ran."),
    ] = 0.0,
    load_trace: Annotated[
        Path | None,
        typer.Option(help="Request trace (CSV) for the fleet's arrivals and token mix (docs/simulator.md)."),
    ] = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the demo: embedded broker, streams worker and a simulated fleet that overheats."""
    from tailhound.demo.run import DemoOptions, run_demo

    settings = settings_from(config)
    setup_logging(log_level, log_format, default_level="warning")  # the demo's own output is its console
    if load_trace is not None:  # a bad trace fails here, before the broker and the worker start
        from tailhound.agents.simulator.trace import load_trace as read_trace

        try:
            read_trace(load_trace)
        except (ValueError, OSError) as exc:
            raise TailhoundError(f"demo: {exc}") from None
    opts = DemoOptions(
        nodes=nodes,
        fleet_minutes=minutes,
        speed=speed,
        console_listen=console_listen,
        hold_s=hold,
        load_trace=None if load_trace is None else str(load_trace),
    )
    if fault:
        opts.faults = list(fault)
    result = asyncio.run(run_demo(settings, opts, console))
    expected = [f for f in opts.faults if f.startswith("thermal-throttle")]
    if expected and not any(e.root_cause == "gpu-thermal-throttle" for e in result.opened):
        err_console.print(f"[red]no gpu-thermal-throttle incident was detected; worker log: {result.worker_log}[/]")
        raise typer.Exit(1)


@app.command()
def worker(config: ConfigOpt = None, log_level: LogLevelOpt = None, log_format: LogFormatOpt = None) -> None:
    """Run the streams worker (Faust) until SIGINT/SIGTERM; without TAILHOUND_BROKER, on the bundled broker."""
    from tailhound.kafka import broker_for, ensure_topics
    from tailhound.streams.ruleset.rulefile import load_rules
    from tailhound.worker.compose import run_worker

    settings = settings_from(config)
    setup_logging(
        log_level, log_format, default_level=settings.streams.log_level, default_format=settings.streams.log_format
    )
    rules = load_rules(settings.rules_dir)
    log_start(
        "worker",
        broker=settings.broker or "bundled",
        app_id=settings.streams.app_id,
        web_listen=settings.streams.web_listen or "off",
        rules=len(rules.rules),
        rules_dir=settings.rules_dir,
    )
    if not settings.broker:
        err_console.print("no broker configured (TAILHOUND_BROKER): starting the bundled one for development")
    with broker_for(settings) as s:
        if not settings.broker:
            err_console.print(f"publish telemetry with TAILHOUND_BROKER={s.broker} (e.g. `tailhound simulate`)")
        asyncio.run(ensure_topics(s))
        run_worker(s, rules)


@app.command()
def broker(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the bundled broker in the foreground and print its URL (for development)."""
    import time

    from tailhound.broker import EmbeddedBroker

    setup_logging(log_level, log_format)
    with EmbeddedBroker(port=port) as b:
        log_start("broker", listen=b.url)
        console.print(f"broker ready: TAILHOUND_BROKER={b.url}  (Ctrl-C stops it)")
        while b.proc is not None and b.proc.poll() is None:
            time.sleep(0.5)
        raise TailhoundError("the broker process exited")


@app.command()
def simulate(
    config: ConfigOpt = None,
    minutes: Annotated[float, typer.Option(help="Minutes of fleet time.")] = 60.0,
    speed: Annotated[
        float, typer.Option(help="Fleet seconds per wall second (0: as fast as possible; ignored with --record).")
    ] = 0.0,
    nodes: Annotated[int, typer.Option(min=1, max=512)] = 4,
    seed: Annotated[int, typer.Option()] = 7,
    fault: Annotated[list[str] | None, typer.Option(help="Fault to inject (repeatable).")] = None,
    record: Annotated[
        Path | None, typer.Option("--record", help="Write a scrape recording (JSON lines) instead of publishing.")
    ] = None,
    engine: Annotated[str, typer.Option(help="Inference engine the fleet runs: vllm or tgi.")] = "vllm",
    dcgm_fields: Annotated[
        str, typer.Option(help="dcgm-exporter fields: all, or default (the exporter's default counters only).")
    ] = "all",
    noise: Annotated[str, typer.Option(help="basic, or realistic (traffic bursts, drift, missed scrapes).")] = "basic",
    load_trace: Annotated[
        Path | None,
        typer.Option(
            help="Request trace (CSV: arrived_at, num_prefill_tokens, num_decode_tokens) for arrivals and token mix."
        ),
    ] = None,
    load_trace_peak: Annotated[
        float, typer.Option(min=0.01, max=4.0, help="Share of the fleet's capacity the trace's busiest minute reaches.")
    ] = 0.8,
    load_trace_start: Annotated[str, typer.Option(help="Where in the trace to start, e.g. 46m (it loops).")] = "0",
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr.")] = True,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Publish a simulated fleet's snapshots to the configured broker's telemetry topic (or --record them)."""
    from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig, parse_duration

    setup_logging(log_level, log_format, default_level="warning")
    try:
        sim_config = SimConfig(
            nodes=nodes,
            seed=seed,
            engine=engine,
            dcgm_fields=dcgm_fields,
            noise=noise,
            load_trace=None if load_trace is None else str(load_trace),
            load_trace_peak=load_trace_peak,
            load_trace_start_s=parse_duration(load_trace_start),
        )
        sim = FleetSimulator(sim_config, [FaultSpec.parse(f) for f in fault or []])
    except (ValueError, TypeError, OSError) as exc:
        raise TailhoundError(f"simulate: {exc}") from None
    ticks = TickProgress(
        sim,
        ProgressReporter(
            "simulate", unit="ticks", enabled=progress, total=max(1, round(minutes * 60 / sim.config.interval_s))
        ),
    )
    if record is not None:
        from tailhound.agents.simulator.recording import write_recording

        try:
            n = write_recording(ticks, minutes, record)  # type: ignore[arg-type] - it only calls run()
        finally:
            ticks.reporter.close()
        console.print(f"wrote {n} records to {record}")
        return

    from tailhound.agents.publisher import SnapshotPublisher
    from tailhound.kafka import ensure_topics

    settings = settings_from(config)
    if not settings.broker:
        raise TailhoundError(
            "simulate publishes to a running broker: set TAILHOUND_BROKER=kafka://host:9092 "
            "(`tailhound worker` prints the URL of the bundled one it starts), "
            "or write a recording with --record FILE"
        )

    async def _run() -> int:
        import time

        await ensure_topics(settings)
        t0 = time.monotonic()
        async with SnapshotPublisher(settings) as pub:
            for i, (_ts, snaps) in enumerate(ticks.run(minutes * 60)):
                await pub.publish(snaps)
                if speed > 0:
                    await asyncio.sleep(max(0.0, t0 + (i + 1) * sim.config.interval_s / speed - time.monotonic()))
            return pub.sent

    try:
        sent = asyncio.run(_run())
    finally:
        ticks.reporter.close()
    console.print(f"published {sent} snapshots to {settings.telemetry_topic}")


@app.command()
def agent(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="agent.yaml: collectors, listen, publish.")
    ] = None,
    from_recording: Annotated[
        Path | None, typer.Option("--from-recording", help="Publish this scrape recording instead of collecting.")
    ] = None,
    speed: Annotated[float, typer.Option(help="Replay pace: recorded seconds per wall second (0: at once).")] = 0.0,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the node agent: collect, publish one snapshot per collection (TAILHOUND_BROKER)."""
    from tailhound.agents.config import AgentConfig, load_agent_config
    from tailhound.agents.main import run_agent, run_replay

    setup_logging(log_level, log_format)
    settings = settings_from(None)
    if from_recording is not None:
        cfg = load_agent_config(config) if config else AgentConfig(listen=None)
        n = asyncio.run(run_replay(settings, from_recording, speed, cfg))
        console.print(f"published {n} snapshots from {from_recording} to {settings.telemetry_topic}")
        return
    if config is None:
        raise TailhoundError("tailhound agent needs --config agent.yaml (or --from-recording FILE)")
    cfg = load_agent_config(config)
    log_start("agent", config=config, listen=cfg.listen or "off", broker=settings.broker or None)
    asyncio.run(run_agent(settings, cfg, duration_s=duration, config_path=config))


@app.command()
def record(
    config: Annotated[Path, typer.Option("--config", "-c", help="agent.yaml: the collectors to record.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Recording to write (JSON lines).")],
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds (default: Ctrl-C).")] = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Write what the agent collects as a scrape recording (docs/recording-format.md); no broker needed."""
    from tailhound.agents.config import load_agent_config
    from tailhound.agents.main import run_record

    setup_logging(log_level, log_format, default_level="warning")
    cfg = load_agent_config(config)
    log_start("record", config=config, out=out, duration_s=duration)
    n = asyncio.run(run_record(cfg, out, duration_s=duration))
    console.print(f"wrote {n} records to {out}")
