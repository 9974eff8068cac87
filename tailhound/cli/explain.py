"""`tailhound explain INCIDENT`: why this root cause and not another, from the incident's recorded evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOpt, app, console, settings_from


@app.command()
def explain(
    incident: Annotated[
        str | None,
        typer.Argument(
            help="Incident id (or a unique prefix); with --file, optional when the file holds one incident."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", help="Incident events: `tailhound replay --out` JSON lines, or a JSON event / list."
        ),
    ] = None,
    versus: Annotated[str | None, typer.Option("--versus", help="Only why not this cause (a candidate).")] = None,
    config: ConfigOpt = None,
) -> None:
    """Why this root cause and not another: the incident's ranked candidates and their recorded evidence."""
    from tailhound.notifier.explain import events_from_file, explain, pick, topic_events

    events = events_from_file(file) if file is not None else topic_events(settings_from(config))
    console.print(explain(pick(events, incident), versus), markup=False, highlight=False)
