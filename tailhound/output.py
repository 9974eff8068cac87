"""Command-line output shared by every command: consoles that never cut piped output, ``-o`` for listings,
``-h``, and the ``--log-level`` / ``--log-format`` options of the long-running processes."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from tailhound.errors import TailhoundError

#: the width piped output is laid out at: wide enough that no table cell or panel line is cut or folded
PIPE_WIDTH = 4096
#: every command answers -h as --help (click hands help_option_names down to subcommands)
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
OUTPUT_FORMATS = ("table", "wide", "json", "yaml")


def make_console(*, stderr: bool = False, file: Any = None) -> Console:
    """A console for command output: on a terminal its width; piped or redirected, PIPE_WIDTH (rich's default
    of 80 columns there cut ids, paths and panels), and soft wrap so long lines stay whole."""
    probe = Console(stderr=stderr, file=file)
    width = None if probe.is_terminal else PIPE_WIDTH
    return Console(stderr=stderr, file=file, soft_wrap=True, width=width)


def _output_choice(value: str) -> str:
    if value not in OUTPUT_FORMATS:
        raise typer.BadParameter(f"{value!r}: use one of {', '.join(OUTPUT_FORMATS)}")
    return value


OutputOpt = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        callback=_output_choice,
        help="table, wide (more columns), json or yaml (for scripts: every field, never cut).",
    ),
]
LogLevelOpt = Annotated[
    str | None,
    typer.Option("--log-level", help="debug, info, warning or error (default: $TAILHOUND_LOG_LEVEL, else info)."),
]
LogFormatOpt = Annotated[
    str | None, typer.Option("--log-format", help="logfmt or json (default: $TAILHOUND_LOG_FORMAT, else logfmt).")
]


@dataclass
class Listing:
    """Rows of a list command: `columns` in the table, `wide` added by ``-o wide``; json/yaml get `records`."""

    columns: Sequence[str]
    wide: Sequence[str] = ()
    rows: list[tuple[Sequence[str], Sequence[str]]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, cells: Sequence[str], wide: Sequence[str] = (), record: dict[str, Any] | None = None) -> None:
        self.rows.append((list(cells), list(wide)))
        self.records.append(
            record if record is not None else dict(zip([*self.columns, *self.wide], [*cells, *wide], strict=False))
        )


def check_output_format(fmt: str) -> str:
    if fmt not in OUTPUT_FORMATS:
        raise TailhoundError(f"--output {fmt!r}: use one of {', '.join(OUTPUT_FORMATS)}")
    return fmt


def print_listing(listing: Listing, fmt: str, console: Console) -> None:
    """Print `listing` as a table (``wide``: with the extra columns), or its records as JSON / YAML on stdout."""
    check_output_format(fmt)
    if fmt == "json":
        sys.stdout.write(json.dumps(listing.records, indent=2, default=str) + "\n")
        return
    if fmt == "yaml":
        sys.stdout.write(
            yaml.safe_dump(listing.records, sort_keys=False, allow_unicode=True) if listing.records else "[]\n"
        )
        return
    names = [*listing.columns, *(listing.wide if fmt == "wide" else ())]
    table = Table()
    for name in names:
        table.add_column(name, overflow="fold")  # on a terminal, long ids fold onto the next line, never cut
    for cells, wide in listing.rows:
        table.add_row(*cells, *(wide if fmt == "wide" else ()))
    console.print(table)
