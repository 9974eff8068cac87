"""``tailhound capacity``: knees, plateau, safe rate, max_num_seqs and KEDA values from a load test or telemetry.

``tailhound capacity RESULT.json|RECORDING... [--out capacity.yaml] [--plots DIR] [--percentile p95|p99]
[--model-pattern P] [--format table|json]``

Each input is either a load test's result (``tailhound loadtest``: one JSON document, a
:class:`~tailhound.capacity.model.LoadTestResult`) or a scrape recording (JSON lines, .gz/.zst too); the
kind is told from the first line (a recording's lines have ``node`` and ``job``). Every load test gives one
recommendation (``source: loadtest:<file>``); the recordings are read one after the other as one telemetry
stream, one recommendation per model (``source: telemetry:<files>``). :func:`register` adds the command to
an app (``tailhound/cli/`` does).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from tailhound.errors import TailhoundError
from tailhound.output import make_console

FORMATS = ("table", "json")


class CapacityInputError(TailhoundError):
    """An input that is neither a load test result nor a recording, or that cannot be analysed."""


def input_kind(path: Path) -> str:
    """``"recording"`` or ``"loadtest"``, from the file name and its first line."""
    if path.suffix in (".gz", ".zst"):
        return "recording"
    try:
        with path.open("rb") as fh:
            first = fh.readline(1 << 20).strip()
    except OSError as exc:
        raise CapacityInputError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        obj = json.loads(first) if first else None
    except ValueError:
        obj = None
    if isinstance(obj, dict) and "node" in obj and "job" in obj:
        return "recording"
    return "loadtest"


def _load_result(path: Path):  # LoadTestResult
    from tailhound.capacity.model import LoadTestResult

    try:
        return LoadTestResult.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValidationError, ValueError) as exc:
        detail = str(exc).splitlines()
        raise CapacityInputError(
            f"{path}: neither a load test result (tailhound loadtest) nor a scrape recording: " + "; ".join(detail[:3])
        ) from None


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.4g}{unit}"


def _table(analysis, console: Console) -> None:
    from tailhound.capacity.recommend import keda_snippet

    rec = analysis.recommendation
    unit = " req/s" if rec.load_unit == "requests_per_s" else " in flight"
    t = Table(title=f"{rec.model}  ({rec.source})", title_justify="left")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_column("detail")
    pct = analysis.percentile.upper()
    for name, k in (("TTFT knee", rec.ttft_knee), ("TPOT knee", rec.tpot_knee)):
        if k is None:
            t.add_row(f"{name} ({pct})", "none", "no bend within the tested load")
        else:
            t.add_row(
                f"{name} ({pct})", _fmt(k.load, unit), f"{k.latency_s:.4g} s there, confidence {k.confidence:.2f}"
            )
    t.add_row(
        "throughput plateau",
        _fmt(rec.throughput_plateau_rps, " req/s"),
        f"from {_fmt(analysis.plateau_load, unit)}" if analysis.plateau_load is not None else "not reached",
    )
    t.add_row(
        "TPOT outpaces throughput",
        _fmt(rec.tpot_outpaces_throughput_at, unit),
        "the max_num_seqs point" if rec.tpot_outpaces_throughput_at is not None else "not within the test",
    )
    t.add_row("safe request rate", _fmt(rec.safe_request_rate, " req/s"), "per engine: the lower knee")
    t.add_row("max_num_seqs", str(rec.recommended_max_num_seqs), "vLLM --max-num-seqs")
    t.add_row("queue scale-out", _fmt(rec.queue_scale_out), "requests waiting per engine")
    t.add_row("KEDA queue threshold", _fmt(rec.keda.get("queue")), "AverageValue of waiting requests")
    t.add_row(
        "KEDA batch threshold", _fmt(rec.keda.get("batch")), "AverageValue of running requests (0.8 x max_num_seqs)"
    )
    console.print(t)
    for note in analysis.notes:
        console.print(f"  - {note}", highlight=False)
    console.print("deploy/keda/vllm-scaledobject.yaml, the two thresholds:", highlight=False)
    console.print(keda_snippet(rec), highlight=False, markup=False)


def capacity(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            help="A load test result (tailhound loadtest, JSON) or scrape recordings (JSON lines, .gz/.zst).",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the capacity file (YAML) rules read (settings streams.capacity_file)."),
    ] = None,
    plots: Annotated[
        Path | None,
        typer.Option(
            "--plots", help="Write PNG plots into this directory (<model>-ttft.png, -tpot.png, -throughput.png)."
        ),
    ] = None,
    percentile: Annotated[
        str, typer.Option("--percentile", help="Latency percentile of the knees: p95 or p99.")
    ] = "p95",
    model_pattern: Annotated[
        str | None,
        typer.Option(
            "--model-pattern",
            help="With --out: the model pattern (fnmatch) of the capacity file's entry (one model "
            "only; default: the model name).",
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="Standard output: table (for people) or json (the recommendations).")
    ] = "table",
    window: Annotated[
        float,
        typer.Option("--window", min=1.0, help="Telemetry: seconds of event time per engine and point before binning."),
    ] = 60.0,
    bins: Annotated[int, typer.Option("--bins", min=2, help="Telemetry: load bins per model.")] = 24,
) -> None:
    """Find the TTFT and TPOT knees, the throughput plateau, the safe request rate per engine, max_num_seqs and
    the queue level to scale out at, from a load test or from recorded production telemetry."""
    from tailhound.capacity.recommend import PERCENTILES, build_capacity_file, recommend, write_capacity_file

    console = make_console()  # piped: the tables whole, not cut at 80 columns
    err = make_console(stderr=True)
    try:
        if percentile not in PERCENTILES:
            raise CapacityInputError(f"--percentile {percentile!r}: use {' or '.join(PERCENTILES)}")
        if fmt not in FORMATS:
            raise CapacityInputError(f"--format {fmt!r}: use {' or '.join(FORMATS)}")
        analyses = []
        recordings = []
        for path in inputs:
            if input_kind(path) == "recording":
                recordings.append(path)
            else:
                try:
                    analyses.append(
                        recommend(_load_result(path), source=f"loadtest:{path.name}", percentile=percentile)
                    )
                except ValueError as exc:
                    raise CapacityInputError(f"{path}: {exc}") from None
        if recordings:
            from tailhound.capacity.telemetry import recommend_from_telemetry
            from tailhound.rulestest.recordings import iter_recordings

            source = "telemetry:" + ",".join(p.name for p in recordings)
            try:
                analyses += recommend_from_telemetry(
                    iter_recordings(recordings, lambda msg: err.print(f"[yellow]warning:[/] {msg}", highlight=False)),
                    source=source,
                    percentile=percentile,
                    window_s=window,
                    bins=bins,
                )
            except ValueError as exc:
                raise CapacityInputError(f"{', '.join(map(str, recordings))}: {exc}") from None
        plotted: list[Path] = []
        by_model: dict[str, list[Path]] = {}
        if plots is not None:
            from tailhound.capacity.plots import write_plots

            for a in analyses:
                by_model[a.recommendation.model] = write_plots(a, plots)
                plotted += by_model[a.recommendation.model]
        written = None
        if out is not None:
            try:
                cf = build_capacity_file([a.recommendation for a in analyses], model_pattern=model_pattern)
            except ValueError as exc:
                raise CapacityInputError(str(exc)) from None
            # the plots, where the file is read from (the incident console's capacity page shows them)
            patterns = dict(zip([a.recommendation.model for a in analyses], cf.models, strict=True))
            cf.plots = {patterns[m]: [os.path.relpath(p, Path(out).parent) for p in ps] for m, ps in by_model.items()}
            write_capacity_file(cf, out)
            written = out
    except TailhoundError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None

    if fmt == "json":
        typer.echo(json.dumps([a.recommendation.model_dump(mode="json") for a in analyses], indent=2))
    else:
        for a in analyses:
            _table(a, console)
    if written is not None:
        err.print(f"wrote {written} ({len(analyses)} model{'s' if len(analyses) != 1 else ''})", highlight=False)
    for p in plotted:
        err.print(f"wrote {p}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``capacity`` to `app`."""
    app.command("capacity")(capacity)
