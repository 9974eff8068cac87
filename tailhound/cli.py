"""The ``tailhound`` command line."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tailhound import __version__
from tailhound.capacity_file import capacity_limits
from tailhound.errors import TailhoundError
from tailhound.logs import log_start, setup_logging
from tailhound.output import CONTEXT_SETTINGS, Listing, LogFormatOpt, LogLevelOpt, make_console, print_listing
from tailhound.progress import ProgressReporter, TickProgress
from tailhound.settings import Settings, load_settings

app = typer.Typer(
    name="tailhound",
    help="Event-driven alert correlation for LLM inference fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)
rules_app = typer.Typer(help="Work with rule files.", no_args_is_help=True, context_settings=CONTEXT_SETTINGS)
app.add_typer(rules_app, name="rules")


def _add_notifier_commands() -> None:
    from tailhound.notifier.cli import incidents_app, notifier_app, silence_app

    app.add_typer(notifier_app, name="notifier")
    app.add_typer(silence_app, name="silence")
    app.add_typer(incidents_app, name="incidents")


_add_notifier_commands()

console: Console = make_console()  # piped: whole lines (paths, JSON, panels), never cut at 80 columns
err_console: Console = make_console(stderr=True)

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML settings file (else $TAILHOUND_CONFIG).")
]


def _settings(config: Path | None, **overrides: object) -> Settings:
    return load_settings(config, **{k: v for k, v in overrides.items() if v is not None})


def _print_version(value: bool) -> None:
    if value:
        console.print(f"tailhound {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit.")
    ] = False,
) -> None:
    """Event-driven alert correlation for LLM inference fleets."""


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
    console_listen: Annotated[str, typer.Option(
        "--console", help="Where the incident console listens (loopback host:port; port 0: any free one; '': off).")
    ] = "127.0.0.1:0",
    hold: Annotated[float, typer.Option(
        min=0, max=86400, help="Keep the incident console up this many seconds after the fleet ran.")] = 0.0,
    load_trace: Annotated[Path | None, typer.Option(
        help="Request trace (CSV) for the fleet's arrivals and token mix (docs/simulator.md).")] = None,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the demo: embedded broker, streams worker and a simulated fleet that overheats."""
    from tailhound.demo import DemoOptions, run_demo

    settings = _settings(config)
    setup_logging(log_level, log_format, default_level="warning")  # the demo's own output is its console
    if load_trace is not None:  # a bad trace fails here, before the broker and the worker start
        from tailhound.agents.simulator.trace import load_trace as read_trace

        try:
            read_trace(load_trace)
        except (ValueError, OSError) as exc:
            raise TailhoundError(f"demo: {exc}") from None
    opts = DemoOptions(nodes=nodes, fleet_minutes=minutes, speed=speed, console_listen=console_listen, hold_s=hold,
                       load_trace=None if load_trace is None else str(load_trace))
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
    from tailhound.streams.ruleset import load_rules
    from tailhound.worker import run_worker

    settings = _settings(config)
    setup_logging(log_level, log_format, default_level=settings.streams.log_level,
                  default_format=settings.streams.log_format)
    rules = load_rules(settings.rules_dir)
    log_start("worker", broker=settings.broker or "bundled", app_id=settings.streams.app_id,
              web_listen=settings.streams.web_listen or "off", rules=len(rules.rules), rules_dir=settings.rules_dir)
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
    load_trace: Annotated[Path | None, typer.Option(
        help="Request trace (CSV: arrived_at, num_prefill_tokens, num_decode_tokens) for arrivals and token mix.")
    ] = None,
    load_trace_peak: Annotated[float, typer.Option(
        min=0.01, max=4.0, help="Share of the fleet's capacity the trace's busiest minute reaches.")] = 0.8,
    load_trace_start: Annotated[str, typer.Option(help="Where in the trace to start, e.g. 46m (it loops).")] = "0",
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr.")] = True,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Publish a simulated fleet's snapshots to the configured broker's telemetry topic (or --record them)."""
    from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig, parse_duration

    setup_logging(log_level, log_format, default_level="warning")
    try:
        sim_config = SimConfig(nodes=nodes, seed=seed, engine=engine, dcgm_fields=dcgm_fields, noise=noise,
                               load_trace=None if load_trace is None else str(load_trace),
                               load_trace_peak=load_trace_peak, load_trace_start_s=parse_duration(load_trace_start))
        sim = FleetSimulator(sim_config, [FaultSpec.parse(f) for f in fault or []])
    except (ValueError, TypeError, OSError) as exc:
        raise TailhoundError(f"simulate: {exc}") from None
    ticks = TickProgress(sim, ProgressReporter("simulate", unit="ticks", enabled=progress,
                                                total=max(1, round(minutes * 60 / sim.config.interval_s))))
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

    settings = _settings(config)
    if not settings.broker:
        raise TailhoundError("simulate publishes to a running broker: set TAILHOUND_BROKER=kafka://host:9092 "
                             "(`tailhound worker` prints the URL of the bundled one it starts), "
                             "or write a recording with --record FILE")

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
    settings = _settings(None)
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


@app.command()
def replay(
    recordings: Annotated[list[Path], typer.Argument(help="Scrape recordings (JSON lines), replayed in order.")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Incident events, one JSON object per line.")
    ] = None,
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory (default: settings.rules_dir).")
    ] = None,
    model: Annotated[
        list[Path] | None, typer.Option("--model", help="Load-aware baseline artifact (repeatable).")
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="Standard output: json (the events as JSON lines, as --out writes "
                                            "them) or table (for people: times from the recording start, evidence). "
                                            "Default: a summary and one line per event."),
    ] = None,
    html_report: Annotated[
        Path | None,
        typer.Option("--html", help="Also write an incident report: one self-contained HTML file (the incident "
                                    "list, then each incident with its evidence and charts), to open from disk."),
    ] = None,
    capacity: Annotated[
        Path | None,
        typer.Option("--capacity", help="Capacity file (`tailhound capacity --out`): the capacity.* thresholds "
                                        "(default: settings streams.capacity_file)."),
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr (a bar on a "
                                                                           "terminal, a line every 10 s otherwise).")
                        ] = True,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run recordings through the streams code offline (no broker, event time, deterministic); .gz and .zst
    recordings are read too, and a cut-off last line is a warning."""
    from tailhound.recording import require_records
    from tailhound.rulestest.recordings import ProgressLine, ReadProgress, iter_recordings
    from tailhound.streams.processor import load_models
    from tailhound.streams.replay import replay_records
    from tailhound.streams.ruleset import load_rules

    if fmt not in (None, "json", "table"):
        raise TailhoundError(f"--format {fmt!r}: use json or table")
    setup_logging(log_level, log_format, default_level="warning")
    settings = _settings(None)
    rs = load_rules(rules or settings.rules_dir)
    first: list[float] = []
    last: list[float] = []
    read = ReadProgress(total_bytes=sum(p.stat().st_size for p in recordings if p.is_file()))
    line = ProgressLine("replay", read, enabled=progress)

    def records():  # the recordings' records, noting the first and the latest event time
        warn = lambda msg: err_console.print(f"[yellow]warning:[/] {msg}", highlight=False)  # noqa: E731
        for rec in line.wrap(iter_recordings(recordings, warn, read)):
            if not first:
                first.append(rec.ts)
            if not last or rec.ts > last[0]:
                last[:] = [rec.ts]
            yield rec

    kwargs = dict(models=load_models(list(model or settings.streams.load_models)),
                  sla={"ttft_p99_sla_s": settings.streams.ttft_p99_sla_s,
                       **capacity_limits(capacity or settings.streams.capacity_file)},
                  max_future_skew_s=settings.streams.max_future_skew_s, node_expiry_s=settings.streams.node_expiry_s)
    if out is None:
        result = replay_records(records(), rs, **kwargs)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            result = replay_records(records(), rs, fh, **kwargs)
    require_records(result.records, recordings)
    opened = sum(1 for e in result.events if e.event == "opened")
    summary = (f"replayed {result.records} records in {result.seconds:.2f} s: {len(result.events)} incident "
               f"events ({opened} opened)" + (f" -> {out}" if out else ""))
    if result.rejected:
        summary += "; skipped " + ", ".join(f"{n} {why}" for why, n in sorted(result.rejected.items()))
    if html_report is not None:
        import time

        from tailhound.notifier.webconsole.report import render_report, report_title
        from tailhound.notifier.webconsole.view import views_from_events

        views = views_from_events(result.events)
        # ages as of the recording's end (its latest event time): the same recording gives the same file
        end = max([*last, *(e.ts for e in result.events)], default=None) or time.time()
        html_report.parent.mkdir(parents=True, exist_ok=True)
        html_report.write_text(render_report(views, title=report_title([p.name for p in recordings]),
                                             generated_at=end), encoding="utf-8")
        summary += f"; incident report ({len(views)} incidents) -> {html_report}"
    if fmt == "json":
        err_console.print(summary, highlight=False)
        for ev in result.events:
            sys.stdout.write(ev.model_dump_json() + "\n")
        return
    console.print(summary)
    if fmt == "table":
        from tailhound.rulestest.report import render_events_table

        sys.stdout.write(render_events_table(result.events, first[0] if first else None))
    elif out is None:
        for ev in result.events:
            console.print(f"{ev.ts:.0f} {ev.event:8s} {ev.root_cause} {ev.scope.describe()}", highlight=False)


@app.command()
def explain(
    incident: Annotated[str | None, typer.Argument(help="Incident id (or a unique prefix); with --file, optional "
                                                        "when the file holds one incident.")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Incident events: `tailhound replay --out` "
                                                                   "JSON lines, or a JSON event / list.")] = None,
    versus: Annotated[str | None, typer.Option("--versus", help="Only why not this cause (a candidate).")] = None,
    config: ConfigOpt = None,
) -> None:
    """Why this root cause and not another: the incident's ranked candidates and their recorded evidence."""
    from tailhound.notifier.explain import events_from_file, explain, pick, topic_events

    events = events_from_file(file) if file is not None else topic_events(_settings(config))
    console.print(explain(pick(events, incident), versus), markup=False, highlight=False)


@app.command()
def schema(
    out: Annotated[Path, typer.Option(help="Directory for the JSON Schema files (created with its parents).")],
    check: Annotated[bool, typer.Option("--check", help="Fail if the files differ from the models.")] = False,
) -> None:
    """Write JSON Schema for the wire models (Snapshot, IncidentEvent, DeadLetter) into --out."""
    from tailhound.schema import stale_schemas, write_schemas

    if check:
        stale = stale_schemas(out)
        if stale:
            err_console.print("out of date: " + ", ".join(map(str, stale)) + f" (run `tailhound schema --out {out}`)")
            raise typer.Exit(1)
        console.print("schemas up to date")
        return
    for p in write_schemas(out):
        console.print(f"wrote {p}")


OutFileOpt = Annotated[
    Path | None, typer.Option("--out", "-o", help="Markdown file to write (default: standard output).")
]
CheckOpt = Annotated[bool, typer.Option("--check", help="Fail if --out differs from what would be written.")]


def _emit_markdown(text: str, out: Path | None, check: bool, how: str) -> None:
    """Print `text`, write it to `out`, or (--check) compare it with `out`; `how` regenerates it."""
    if check:
        if out is None:
            raise TailhoundError("--check compares with a file: give it with --out FILE")
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            err_console.print(f"out of date: {out} (run `{how} --out {out}`)")
            raise typer.Exit(1)
        console.print(f"{out} up to date")
        return
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    unchanged = out.is_file() and out.read_text(encoding="utf-8") == text
    if not unchanged:
        out.write_text(text, encoding="utf-8")
    console.print(f"{'unchanged' if unchanged else 'wrote'} {out}")


@app.command()
def catalog(out: OutFileOpt = None, check: CheckOpt = False) -> None:
    """The signal catalog (tailhound/catalog/signals.yaml) as Markdown tables."""
    from tailhound.catalog.markdown import render_markdown

    _emit_markdown(render_markdown(), out, check, "tailhound catalog")


@app.command()
def example(
    name: Annotated[str | None, typer.Argument(help="Example to print; without it, the list.")] = None,
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="The list as table, wide, json or yaml (default: one line per example).")] = None,
) -> None:
    """Print a bundled example config (start a config from it: `tailhound example agent > agent.yaml`)."""
    from tailhound.resources import EXAMPLES, example_path

    if name is None:
        if output is not None:
            listing = Listing(["name", "what"], wide=["file"])
            for key, (path, what) in EXAMPLES.items():
                listing.add([key, what], [str(path)], {"name": key, "what": what, "file": str(path)})
            print_listing(listing, output, console)
            return
        for key, (_, what) in EXAMPLES.items():
            console.print(f"{key:22s} {what}", highlight=False)
        return
    sys.stdout.write(example_path(name).read_text(encoding="utf-8"))


@rules_app.command("check")
def rules_check(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Rule files or directories (default: settings.rules_dir).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text, or github (workflow annotations).")] = "text",
    config: ConfigOpt = None,
) -> None:
    """Check rule files: every problem of every file, at its line and column, with a hint.

    Exit status: 0 no problem, 1 problems found, 2 a path that does not exist (or a bad option)."""
    from tailhound.streams.rule_check import check_paths

    if fmt not in ("text", "github"):
        raise TailhoundError(f"--format {fmt!r}: use text or github")
    targets = list(paths or [_settings(config).rules_dir])
    problems, count = check_paths(targets)
    for p in problems:
        print(p.github("tailhound rules check") if fmt == "github" else p.text())
    missing = [t for t in targets if not t.exists()]
    if problems:
        files = len({p.path for p in problems})
        err_console.print(f"{len(problems)} problems in {files} files ({count} rules read)", highlight=False)
        raise typer.Exit(2 if missing else 1)
    err_console.print(f"{count} rules OK in {', '.join(str(t) for t in targets)}", highlight=False)


@rules_app.command("doc")
def rules_doc(
    directory: Annotated[Path | None, typer.Argument(help="Rules directory (default: settings.rules_dir).")] = None,
    out: OutFileOpt = None,
    check: CheckOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Each root cause with the rules, evidence and actions that name it, as Markdown."""
    from tailhound.streams.rule_docs import render_root_causes
    from tailhound.streams.ruleset import load_rules

    rs = load_rules(directory or _settings(config).rules_dir)
    _emit_markdown(render_root_causes(rs), out, check, "tailhound rules doc")


@rules_app.command("test")
def rules_test(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Rule test files (YAML; docs/rules-testing.md). Default: the bundled pack's own tests."),
    ] = None,
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory to test instead of each file's rule_files.")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only the tests whose name this regex finds.")] = None,
    events: Annotated[
        bool, typer.Option("--events", help="Print every test's incident events (to write expectations).")
    ] = False,
) -> None:
    """Unit-test rules like `promtool test rules`: input series -> expected incidents. Exit 1 on a failure."""
    import re

    from tailhound.rulestest.unit import bundled_tests, format_file_result, run_file

    def show(name: str, evs: list, start: float) -> None:
        from tailhound.rulestest.report import render_events_table

        sys.stdout.write(f"--- {name}\n" + render_events_table(evs, start, evidence=0))

    try:
        pattern = re.compile(run) if run else None
    except re.error as exc:
        raise TailhoundError(f"--run {run!r}: {exc}") from None
    failed = False
    for path in files or bundled_tests():
        res = run_file(path, rules, pattern, show if events else None)
        sys.stdout.write(format_file_result(res))
        failed |= not res.ok
    raise typer.Exit(1 if failed else 0)


@rules_app.command("backtest")
def rules_backtest(
    recordings: Annotated[list[Path], typer.Argument(help="Scrape recordings (JSON lines; .gz, .zst), in order.")],
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory (default: settings.rules_dir).")
    ] = None,
    truth: Annotated[
        Path | None, typer.Option("--truth", help="YAML of labelled fault windows: precision, recall, time to detect.")
    ] = None,
    against: Annotated[
        str | None, typer.Option("--against", help="Other rules to compare with: a directory or a git ref "
                                                   "(its rules/ tree): incidents gained and lost.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr.")] = True,
    config: ConfigOpt = None,
) -> None:
    """Replay recordings through the rules: per rule how often and when it fired; with --truth, precision and
    recall per root cause; with --against, what another version of the rules would have opened instead."""
    from tailhound.rulestest.backtest import run_backtest
    from tailhound.rulestest.report import render_backtest_json, render_backtest_table

    if fmt not in ("table", "json"):
        raise TailhoundError(f"--format {fmt!r}: use table or json")
    settings = _settings(config)
    report = run_backtest(recordings, rules or settings.rules_dir, truth=truth, against=against,
                          sla={"ttft_p99_sla_s": settings.streams.ttft_p99_sla_s,
                               **capacity_limits(settings.streams.capacity_file)},
                          progress=progress, warn=lambda msg: err_console.print(f"[yellow]warning:[/] {msg}",
                                                                                highlight=False))
    sys.stdout.write(render_backtest_json(report) if fmt == "json" else render_backtest_table(report))


baseline_app = typer.Typer(help="Load-aware baselines (scikit-learn quantile models; fitting needs the `fit` "
                                "extra: pip install 'tailhound[fit]').", no_args_is_help=True,
                           context_settings=CONTEXT_SETTINGS)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("fit")
def baseline_fit(
    recordings: Annotated[list[Path], typer.Argument(help="Scrape recordings of normal operation.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Model artifact to write (versioned JSON).")],
    signal: Annotated[str, typer.Option(help="Latency percentile to model.")] = "latency.ttft.p95",
    quantile: Annotated[float, typer.Option(help="Quantile of the regression.")] = 0.95,
) -> None:
    """Fit the expected `signal` for a given load (token mix, concurrency) from recordings (needs the `fit` extra:
    pip install 'tailhound[fit]')."""
    from tailhound.recording import read_records
    from tailhound.streams.loadfit import training_rows
    from tailhound.streams.loadmodel import LoadModel, require_fit_dependencies

    # before reading the recordings: a missing extra should not cost a replay of them first
    require_fit_dependencies()

    def records():
        for p in recordings:
            yield from read_records(p)

    rows, targets = training_rows(records(), signal=signal)
    if len(rows) < 50:
        raise TailhoundError(f"only {len(rows)} windows with enough requests in the recordings; need >= 50")
    model = LoadModel.fit(rows, targets, quantile=quantile, signal=signal)
    model.save(out)
    fit = model.artifact.fit
    console.print(f"fitted {signal} q={quantile} on {len(rows)} windows -> {out} "
                  f"(pinball loss {fit.pinball_loss:.4g} vs {fit.baseline_pinball_loss:.4g} for a constant)")


@app.command()
def doctor(
    recordings: Annotated[
        list[Path] | None, typer.Argument(help="Scrape recordings (JSON lines) to read the signals from.")
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option("--target", "-t", help="[JOB=]URL of a live Prometheus endpoint to scrape once (repeatable; "
                                            "without JOB the source is told from the metric names)."),
    ] = None,
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory (default: settings.rules_dir).")
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option("--prometheus", help="Base URL of a Prometheus: read what it has of the catalog's metrics "
                                          "through /federate, grouped as the federation ingest does."),
    ] = None,
    job_source: Annotated[
        list[str] | None,
        typer.Option("--job-source", help="JOB=SOURCE: a Prometheus job that is a catalog source under another "
                                          "name, e.g. dcgm-exporter=dcgm (repeatable; with --prometheus)."),
    ] = None,
    node_label: Annotated[
        list[str] | None,
        typer.Option("--node-label", help="Labels naming the node, tried in order (repeatable; with --prometheus; "
                                          "default: node, Hostname, instance)."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    timeout: Annotated[float, typer.Option(min=0.1, max=60, help="Seconds per scrape.")] = 5.0,
    config: ConfigOpt = None,
) -> None:
    """Which rules can fire with the signals a recording, live targets or a Prometheus carry; for each blind
    rule, what is missing and the fix. Exits 1 when a critical rule is blind."""
    from tailhound.catalog import default_catalog
    from tailhound.doctor import diagnose, read_recordings, render_json, render_table, scrape_targets
    from tailhound.streams.ruleset import load_rules

    if fmt not in ("table", "json"):
        raise TailhoundError(f"--format {fmt!r}: use table or json")
    if (job_source or node_label) and not prometheus:
        raise TailhoundError("--job-source and --node-label go with --prometheus URL")
    if not recordings and not target and not prometheus:
        raise TailhoundError("tailhound doctor needs a recording (RECORDING...), live targets (--target [JOB=]URL) "
                             "or a Prometheus (--prometheus URL)")
    rs = load_rules(rules or _settings(config).rules_dir)
    observed = read_recordings(recordings or [])
    if target:
        observed.merge(scrape_targets(list(target), timeout, default_catalog()))
    if prometheus:
        from tailhound.doctor_prometheus import parse_job_sources, read_prometheus

        observed.merge(read_prometheus(prometheus, job_sources=parse_job_sources(job_source or ()),
                                       node_labels=node_label, timeout_s=timeout, catalog=default_catalog()))
    capacity_file = _settings(config).streams.capacity_file  # its capacity.* signals count as present
    report = diagnose(rs, observed, configured=capacity_limits(capacity_file).keys() if capacity_file else ())
    sys.stdout.write(render_json(report) if fmt == "json" else render_table(report))
    raise typer.Exit(report.exit_code)


def _add_capacity_commands() -> None:
    """`tailhound loadtest` and `tailhound capacity` (tailhound/capacity/: locust and matplotlib load lazily)."""
    from tailhound.capacity import capacity_cli, loadtest_cli

    loadtest_cli.register(app)
    capacity_cli.register(app)


_add_capacity_commands()


def _add_ingest_command() -> None:
    """`tailhound ingest` (tailhound/ingest_cli.py): Prometheus remote write and federation in."""
    from tailhound import ingest_cli

    ingest_cli.register(app, lambda: _settings(None))


_add_ingest_command()


def main() -> None:
    try:
        app()
    except TailhoundError as exc:
        from rich.markup import escape

        # escaped: a message's "[fit]" or "[0]" is text, not a style tag
        err_console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted; everything stopped")
        sys.exit(130)


if __name__ == "__main__":
    main()


@app.command("check")
def check(
    paths: Annotated[list[Path], typer.Argument(help="Config files: agent, notifier, ingest, settings, rules, "
                                                 "capacity.")],
    kind: Annotated[str | None, typer.Option(help="The kind of every file (default: read from its keys): "
                                             "agent, notifier, ingest, settings, rules, capacity.")] = None,
) -> None:
    """Check config files with the loaders their processes use: FILE: OK, or every problem at its line.

    Exit status: 0 every file is valid (warnings alone included), 1 a problem in any file."""
    from tailhound.check import KINDS, check_file

    if kind is not None and kind not in KINDS:
        raise TailhoundError(f"--kind {kind!r}: use one of {', '.join(KINDS)}")
    failed = False
    for path in paths:
        checked = check_file(path, kind)
        for p in sorted(checked.problems + checked.warnings, key=lambda p: (p.line or 0, p.column or 0)):
            print(p.text())
        if checked.problems:
            failed = True
        else:
            console.print(f"{path}: OK ({checked.kind})", highlight=False)
    if failed:
        raise typer.Exit(1)
