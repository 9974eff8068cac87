"""Reference output: `schema` (JSON Schema of the wire models), `catalog` (signals) and `example` configs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tailhound.output import Listing, print_listing

from .common import CheckOpt, OutFileOpt, app, console, emit_markdown, err_console


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


@app.command()
def catalog(out: OutFileOpt = None, check: CheckOpt = False) -> None:
    """The signal catalog (tailhound/catalog/signals.yaml) as Markdown tables."""
    from tailhound.catalog.markdown import render_markdown

    emit_markdown(render_markdown(), out, check, "tailhound catalog")


@app.command()
def example(
    name: Annotated[str | None, typer.Argument(help="Example to print; without it, the list.")] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="The list as table, wide, json or yaml (default: one line per example)."),
    ] = None,
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
