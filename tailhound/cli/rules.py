"""`tailhound rules check|doc|test|backtest`: work with rule files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tailhound.capacity_file import capacity_limits
from tailhound.errors import TailhoundError

from .common import CheckOpt, ConfigOpt, OutFileOpt, emit_markdown, err_console, rules_app, settings_from


@rules_app.command("check")
def rules_check(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Rule files or directories (default: settings.rules_dir).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="text, or github (workflow annotations).")] = "text",
    config: ConfigOpt = None,
) -> None:
    """Check rule files: every problem of every file, at its line and column, with a hint.

    Exit status: 0 no problem, 1 problems found, 2 a path that does not exist (or a bad option)."""
    from tailhound.streams.ruleset.check import check_paths

    if fmt not in ("text", "github"):
        raise TailhoundError(f"--format {fmt!r}: use text or github")
    targets = list(paths or [settings_from(config).rules_dir])
    problems, count = check_paths(targets)
    for p in problems:
        print(p.github("tailhound rules check") if fmt == "github" else p.text())
    missing = [t for t in targets if not t.exists()]
    if problems:
        files = len({p.path for p in problems})
        err_console.print(f"{len(problems)} problems in {files} files ({count} rules read)", highlight=False)
        raise typer.Exit(2 if missing else 1)
    err_console.print(f"{count} rules OK in {', '.join(str(t) for t in targets)}", highlight=False)


@rules_app.command("doc")
def rules_doc(
    directory: Annotated[Path | None, typer.Argument(help="Rules directory (default: settings.rules_dir).")] = None,
    out: OutFileOpt = None,
    check: CheckOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Each root cause with the rules, evidence and actions that name it, as Markdown."""
    from tailhound.streams.ruleset.docs import render_root_causes
    from tailhound.streams.ruleset.rulefile import load_rules

    rs = load_rules(directory or settings_from(config).rules_dir)
    emit_markdown(render_root_causes(rs), out, check, "tailhound rules doc")


@rules_app.command("test")
def rules_test(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Rule test files (YAML; docs/rules-testing.md). Default: the bundled pack's own tests."),
    ] = None,
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory to test instead of each file's rule_files.")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only the tests whose name this regex finds.")] = None,
    events: Annotated[
        bool, typer.Option("--events", help="Print every test's incident events (to write expectations).")
    ] = False,
) -> None:
    """Unit-test rules like `promtool test rules`: input series -> expected incidents. Exit 1 on a failure."""
    import re

    from tailhound.rulestest.unit import bundled_tests, format_file_result, run_file

    def show(name: str, evs: list, start: float) -> None:
        from tailhound.rulestest.report import render_events_table

        sys.stdout.write(f"--- {name}\n" + render_events_table(evs, start, evidence=0))

    try:
        pattern = re.compile(run) if run else None
    except re.error as exc:
        raise TailhoundError(f"--run {run!r}: {exc}") from None
    failed = False
    for path in files or bundled_tests():
        res = run_file(path, rules, pattern, show if events else None)
        sys.stdout.write(format_file_result(res))
        failed |= not res.ok
    raise typer.Exit(1 if failed else 0)


@rules_app.command("backtest")
def rules_backtest(
    recordings: Annotated[list[Path], typer.Argument(help="Scrape recordings (JSON lines; .gz, .zst), in order.")],
    rules: Annotated[
        Path | None, typer.Option("--rules", help="Rules directory (default: settings.rules_dir).")
    ] = None,
    truth: Annotated[
        Path | None, typer.Option("--truth", help="YAML of labelled fault windows: precision, recall, time to detect.")
    ] = None,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="Other rules to compare with: a directory or a git ref (its rules/ tree): incidents gained and lost.",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress on stderr.")] = True,
    config: ConfigOpt = None,
) -> None:
    """Replay recordings through the rules: per rule how often and when it fired; with --truth, precision and
    recall per root cause; with --against, what another version of the rules would have opened instead."""
    from tailhound.rulestest.backtest import run_backtest
    from tailhound.rulestest.report import render_backtest_json, render_backtest_table

    if fmt not in ("table", "json"):
        raise TailhoundError(f"--format {fmt!r}: use table or json")
    settings = settings_from(config)
    report = run_backtest(
        recordings,
        rules or settings.rules_dir,
        truth=truth,
        against=against,
        sla={"ttft_p99_sla_s": settings.streams.ttft_p99_sla_s, **capacity_limits(settings.streams.capacity_file)},
        progress=progress,
        warn=lambda msg: err_console.print(f"[yellow]warning:[/] {msg}", highlight=False),
    )
    sys.stdout.write(render_backtest_json(report) if fmt == "json" else render_backtest_table(report))
