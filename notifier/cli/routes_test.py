"""``tailhound notifier routes test``: which routes and receivers a label set or an incident file takes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tailhound.errors import TailhoundError
from tailhound.output import Listing, print_listing
from tailhound.settings import load_settings

from .common import console, err_console, routes_app


@routes_app.command("test")
def routes_test(
    labels: Annotated[
        list[str] | None,
        typer.Argument(help="The incident's labels, LABEL=VALUE (e.g. severity=critical transient=false)."),
    ] = None,
    notifier_config: Annotated[
        Path | None,
        typer.Option("--config", help="Notifier config file (default: setting notifier.config, else the bundled one)."),
    ] = None,
    incident: Annotated[
        Path | None,
        typer.Option(
            "--incident",
            help="Route each incident event of a JSON or JSON-lines file (tailhound replay --out); "
            "LABEL=VALUE arguments override its labels.",
        ),
    ] = None,
    tree: Annotated[bool, typer.Option("--tree", help="Print the routing tree.")] = False,
    verify: Annotated[
        str | None,
        typer.Option(
            "--verify-receivers", help="Exit 1 unless the receivers are exactly these (comma-separated, any order)."
        ),
    ] = None,
    rules: Annotated[
        Path | None,
        typer.Option(
            "--rules", help="Rules directory whose rule names and labels are known (default: settings.rules_dir)."
        ),
    ] = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="text, json or yaml (each case: its labels, routes and receivers; --tree is text only).",
        ),
    ] = "text",
) -> None:
    """Which routes a label set (or each incident of a file) takes and which receivers get it, like
    `amtool config routes test`. Exit status: 0, 1 receivers differ from --verify-receivers, 2 bad input."""
    from tailhound.resources import default_notifier_config

    from ..config_check import label_issues, label_space
    from ..matchers import incident_labels
    from ..route_trace import load_tree, read_incidents, receivers, render_tree, trace

    if output not in ("text", "json", "yaml"):
        raise TailhoundError(f"--output {output!r}: use text, json or yaml")
    path = notifier_config or load_settings(None).notifier.config or default_notifier_config()
    root = load_tree(path)
    given: dict[str, str] = {}
    for arg in labels or []:
        name, sep, value = arg.partition("=")
        name, value = name.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if not sep or not name:
            raise TailhoundError(f"label {arg!r}: write LABEL=VALUE")
        given[name] = value
    space, problems = label_space(rules if rules is not None else load_settings(None).rules_dir)
    if problems:
        raise TailhoundError(problems[0].text())
    bad = [
        f"label {k}={v}: {msg}" + (f" ({hint})" if hint else "")
        for k, v in given.items()
        for msg, hint in label_issues(k, v, space)
    ]
    if bad:
        raise TailhoundError("\n".join(bad))
    if tree and output == "text":  # json/yaml stay one parseable document: the cases
        print("\n".join(render_tree(root)))
    cases: list[tuple[str, dict[str, str]]] = []
    if incident is not None:
        try:
            events = read_incidents(incident)
        except (OSError, ValueError) as exc:
            raise TailhoundError(str(exc)) from None
        seen = set()
        for ev in events:
            case = {**incident_labels(ev), **given}
            key = (ev.incident_id, tuple(sorted(case.items())))
            if key not in seen:
                seen.add(key)
                cases.append((f"{ev.incident_id} #{ev.sequence} {ev.event}", case))
    elif given or not tree or verify is not None:
        cases.append(("", given))
    expected = sorted({r.strip() for r in verify.split(",") if r.strip()}) if verify is not None else None
    differ = 0
    records = []
    for title, case in cases:
        paths = trace(root, case)
        got = receivers(paths)
        records.append(
            {
                "case": title or None,
                "labels": case,
                "receivers": got,
                "routes": [
                    {"route": p.steps[-1].path, "receiver": p.receiver, "inherited": p.inherited, "trace": p.describe()}
                    for p in paths
                ],
            }
        )
        if output == "text":
            shown = ", ".join(f'{k}="{v}"' for k, v in case.items()) or "(no labels)"
            print(f"{title}: {shown}" if title else shown)
            for p in paths:
                print(f"  {p.describe()}")
            print(f"  receivers: {', '.join(got) or 'none'}")
        if expected is not None and sorted(set(got)) != expected:
            differ += 1
            err_console.print(
                f"receivers differ{' for ' + title if title else ''}: expected "
                f"{', '.join(expected) or 'none'}, got {', '.join(got) or 'none'}",
                highlight=False,
            )
    if output != "text":
        print_listing(Listing(["case"], records=records), output, console)
    if differ:
        raise typer.Exit(1)
