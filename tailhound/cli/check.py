"""`tailhound check FILE...`: config files checked with the loaders their processes use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailhound.errors import TailhoundError

from .common import app, console


@app.command("check")
def check(
    paths: Annotated[
        list[Path], typer.Argument(help="Config files: agent, notifier, ingest, settings, rules, capacity.")
    ],
    kind: Annotated[
        str | None,
        typer.Option(
            help="The kind of every file (default: read from its keys): "
            "agent, notifier, ingest, settings, rules, capacity."
        ),
    ] = None,
) -> None:
    """Check config files with the loaders their processes use: FILE: OK, or every problem at its line.

    Exit status: 0 every file is valid (warnings alone included), 1 a problem in any file."""
    from tailhound.cli.check_files import KINDS, check_file

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
