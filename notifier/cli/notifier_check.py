"""``tailhound notifier check``: every problem of notifier config files, at its line and column."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailhound.errors import TailhoundError
from tailhound.settings import load_settings

from .common import ConfigOpt, console, err_console, notifier_app


@notifier_app.command("check")
def notifier_check(
    paths: Annotated[list[Path], typer.Argument(help="Notifier config files (routing, receivers, inhibit rules).")],
    fmt: Annotated[str, typer.Option("--format", help="text, or github (workflow annotations).")] = "text",
    rules: Annotated[
        Path | None,
        typer.Option(
            "--rules",
            help="Rules directory whose rule names and labels matchers may use (default: settings.rules_dir).",
        ),
    ] = None,
    config: ConfigOpt = None,
    secrets: Annotated[bool, typer.Option(help="Also resolve every receiver's secrets and webhook hosts.")] = False,
) -> None:
    """Check notifier configs: every problem of every file, at its line and column, with a hint; matchers,
    grouping and inhibit labels against the labels incidents carry.

    Exit status: 0 no problem (warnings alone included), 1 problems found, 2 a path that does not exist."""
    from ..config_check import check_file, check_secrets, is_error, label_space

    if fmt not in ("text", "github"):
        raise TailhoundError(f"--format {fmt!r}: use text or github")
    space, problems = label_space(rules if rules is not None else load_settings(config).rules_dir)
    missing = bool(problems)
    hosts = load_settings(config).notifier.webhook_allowed_hosts if secrets else []
    checked = [check_file(p, space) for p in paths]
    for c in checked:
        if secrets and c.config is not None:
            c.problems += check_secrets(c, hosts)
        problems += c.problems
        missing |= c.missing
    for p in problems:
        print(p.github("tailhound notifier check") if fmt == "github" else p.text())
    errors = sum(map(is_error, problems))
    for c in checked:
        if c.config is not None and not any(map(is_error, c.problems)):
            cfg = c.config
            console.print(
                f"{c.path}: OK ({len(cfg.receivers)} receivers, {len(cfg.inhibit_rules)} inhibit rules, "
                f"{len(cfg.maintenance)} maintenance windows)",
                highlight=False,
            )
    if problems:
        warnings = len(problems) - errors
        files = len({p.path for p in problems})
        err_console.print(
            f"{_count(errors, 'problem')}, {_count(warnings, 'warning')} in {_count(files, 'file')}", highlight=False
        )
    if missing:
        raise typer.Exit(2)
    if errors:
        raise typer.Exit(1)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
