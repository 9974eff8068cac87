"""`tailhound doctor`: which rules can fire with the signals a recording, targets or a Prometheus carry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tailhound.capacity_file import capacity_limits
from tailhound.errors import TailhoundError

from .common import ConfigOpt, app, settings_from


@app.command()
def doctor(
    recordings: Annotated[
        list[Path] | None, typer.Argument(help="Scrape recordings (JSON lines) to read the signals from.")
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            "-t",
            help="[JOB=]URL of a live Prometheus endpoint to scrape once (repeatable; "
            "without JOB the source is told from the metric names).",
        ),
    ] = None,
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory (default: settings.rules_dir).")
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Base URL of a Prometheus: read what it has of the catalog's metrics "
            "through /federate, grouped as the federation ingest does.",
        ),
    ] = None,
    job_source: Annotated[
        list[str] | None,
        typer.Option(
            "--job-source",
            help="JOB=SOURCE: a Prometheus job that is a catalog source under another "
            "name, e.g. dcgm-exporter=dcgm (repeatable; with --prometheus).",
        ),
    ] = None,
    node_label: Annotated[
        list[str] | None,
        typer.Option(
            "--node-label",
            help="Labels naming the node, tried in order (repeatable; with --prometheus; "
            "default: node, Hostname, instance).",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    timeout: Annotated[float, typer.Option(min=0.1, max=60, help="Seconds per scrape.")] = 5.0,
    config: ConfigOpt = None,
) -> None:
    """Which rules can fire with the signals a recording, live targets or a Prometheus carry; for each blind
    rule, what is missing and the fix. Exits 1 when a critical rule is blind."""
    from tailhound.catalog import default_catalog
    from tailhound.doctor.observed import read_recordings, scrape_targets
    from tailhound.doctor.report import diagnose, render_json, render_table
    from tailhound.streams.ruleset.rulefile import load_rules

    if fmt not in ("table", "json"):
        raise TailhoundError(f"--format {fmt!r}: use table or json")
    if (job_source or node_label) and not prometheus:
        raise TailhoundError("--job-source and --node-label go with --prometheus URL")
    if not recordings and not target and not prometheus:
        raise TailhoundError(
            "tailhound doctor needs a recording (RECORDING...), live targets (--target [JOB=]URL) "
            "or a Prometheus (--prometheus URL)"
        )
    rs = load_rules(rules or settings_from(config).rules_dir)
    observed = read_recordings(recordings or [])
    if target:
        observed.merge(scrape_targets(list(target), timeout, default_catalog()))
    if prometheus:
        from tailhound.doctor.prometheus import parse_job_sources, read_prometheus

        observed.merge(
            read_prometheus(
                prometheus,
                job_sources=parse_job_sources(job_source or ()),
                node_labels=node_label,
                timeout_s=timeout,
                catalog=default_catalog(),
            )
        )
    capacity_file = settings_from(config).streams.capacity_file  # its capacity.* signals count as present
    report = diagnose(rs, observed, configured=capacity_limits(capacity_file).keys() if capacity_file else ())
    sys.stdout.write(render_json(report) if fmt == "json" else render_table(report))
    raise typer.Exit(report.exit_code)
