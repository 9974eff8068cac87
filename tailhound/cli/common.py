"""What every command module shares: the root Typer app, the consoles, common options and helpers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tailhound import __version__
from tailhound.errors import TailhoundError
from tailhound.output import CONTEXT_SETTINGS, make_console
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

console: Console = make_console()  # piped: whole lines (paths, JSON, panels), never cut at 80 columns
err_console: Console = make_console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file (else $TAILHOUND_CONFIG).")]


def settings_from(config: Path | None, **overrides: object) -> Settings:
    """Settings from `config` (or $TAILHOUND_CONFIG) with the options the user gave on top."""
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


OutFileOpt = Annotated[
    Path | None, typer.Option("--out", "-o", help="Markdown file to write (default: standard output).")
]
CheckOpt = Annotated[bool, typer.Option("--check", help="Fail if --out differs from what would be written.")]


def emit_markdown(text: str, out: Path | None, check: bool, how: str) -> None:
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
