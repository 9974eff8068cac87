"""`tailhound replay`: recordings through the streams code offline, as incident events, a table or a report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tailhound.capacity_file import capacity_limits
from tailhound.errors import TailhoundError
from tailhound.logs import setup_logging
from tailhound.output import LogFormatOpt, LogLevelOpt

from .common import app, console, err_console, settings_from


@app.command()
def replay(
    recordings: Annotated[list[Path], typer.Argument(help="Scrape recordings (JSON lines), replayed in order.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Incident events, one JSON object per line.")] = None,
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory (default: settings.rules_dir).")
    ] = None,
    model: Annotated[
        list[Path] | None, typer.Option("--model", help="Load-aware baseline artifact (repeatable).")
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="Standard output: json (the events as JSON lines, as --out writes "
            "them) or table (for people: times from the recording start, evidence). "
            "Default: a summary and one line per event.",
        ),
    ] = None,
    html_report: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write an incident report: one self-contained HTML file (the incident "
            "list, then each incident with its evidence and charts), to open from disk.",
        ),
    ] = None,
    capacity: Annotated[
        Path | None,
        typer.Option(
            "--capacity",
            help="Capacity file (`tailhound capacity --out`): the capacity.* thresholds "
            "(default: settings streams.capacity_file).",
        ),
    ] = None,
    progress: Annotated[
        bool,
        typer.Option(
            "--progress/--no-progress", help="Progress on stderr (a bar on a terminal, a line every 10 s otherwise)."
        ),
    ] = True,
    log_level: LogLevelOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run recordings through the streams code offline (no broker, event time, deterministic); .gz and .zst
    recordings are read too, and a cut-off last line is a warning."""
    from tailhound.recording import require_records
    from tailhound.rulestest.recordings import ProgressLine, ReadProgress, iter_recordings
    from tailhound.streams.processor import read_load_models
    from tailhound.streams.replay import replay_records
    from tailhound.streams.ruleset.rulefile import load_rules

    if fmt not in (None, "json", "table"):
        raise TailhoundError(f"--format {fmt!r}: use json or table")
    setup_logging(log_level, log_format, default_level="warning")
    settings = settings_from(None)
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

    kwargs = dict(
        load_models=read_load_models(list(model or settings.streams.load_models)),
        sla={
            "ttft_p99_sla_s": settings.streams.ttft_p99_sla_s,
            **capacity_limits(capacity or settings.streams.capacity_file),
        },
        max_future_skew_s=settings.streams.max_future_skew_s,
        node_expiry_s=settings.streams.node_expiry_s,
    )
    if out is None:
        result = replay_records(records(), rs, **kwargs)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            result = replay_records(records(), rs, fh, **kwargs)
    require_records(result.records, recordings)
    opened = sum(1 for e in result.events if e.event == "opened")
    summary = (
        f"replayed {result.records} records in {result.seconds:.2f} s: {len(result.events)} incident "
        f"events ({opened} opened)" + (f" -> {out}" if out else "")
    )
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
        html_report.write_text(
            render_report(views, title=report_title([p.name for p in recordings]), generated_at=end), encoding="utf-8"
        )
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
