"""`tailhound baseline fit`: load-aware baselines from recordings (the `fit` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailhound.errors import TailhoundError
from tailhound.output import CONTEXT_SETTINGS

from .common import app, console

baseline_app = typer.Typer(
    help="Load-aware baselines (scikit-learn quantile models; fitting needs the `fit` "
    "extra: pip install 'tailhound[fit]').",
    no_args_is_help=True,
    context_settings=CONTEXT_SETTINGS,
)
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
    console.print(
        f"fitted {signal} q={quantile} on {len(rows)} windows -> {out} "
        f"(pinball loss {fit.pinball_loss:.4g} vs {fit.baseline_pinball_loss:.4g} for a constant)"
    )
