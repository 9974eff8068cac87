"""``tailhound notifier run|check|routes test``, ``tailhound silence add|list|expire``,
``tailhound incidents list|show``.

Silences are written straight to the notifier's state topic (key ``silence:<id>``), where the active
notifier picks them up within a tick and where they survive restarts. Incidents are read from the
incidents topic (lifecycle events) joined with the notifier state (what was delivered where).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from tailhound.durations import parse_duration
from tailhound.errors import TailhoundError
from tailhound.logs import log_start, setup_logging
from tailhound.output import Listing, LogFormatOpt, LogLevelOpt, OutputOpt, make_console, print_listing
from tailhound.settings import Settings, load_settings

from .history import RECENT_PREFIX
from .matchers import Matcher
from .state import GroupState, Silence

console = make_console()  # piped: ids, matchers and panels whole, never cut at 80 columns
err_console = make_console(stderr=True)
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file (else $TAILHOUND_CONFIG).")]

# -h as --help comes from the root app (tailhound.cli): click hands help_option_names down to subcommands
notifier_app = typer.Typer(help="Run or check the notifier.", no_args_is_help=True)
silence_app = typer.Typer(help="Silence incidents by label matchers.", no_args_is_help=True)
incidents_app = typer.Typer(help="Incidents and what was notified about them.", no_args_is_help=True)


def _settings(config: Path | None) -> Settings:
    s = load_settings(config)
    if not s.broker:
        raise TailhoundError("no broker configured (set TAILHOUND_BROKER=kafka://host:9092)")
    return s


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "-"


def _parse_time(text: str) -> float:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TailhoundError(f"invalid time {text!r}: use ISO 8601, e.g. 2026-12-01T02:00:00Z") from exc
    if dt.tzinfo is None:
        raise TailhoundError(f"time {text!r} needs a time zone (e.g. ...Z or +01:00)")
    return dt.timestamp()


# --- notifier ------------------------------------------------------------------------------------
@notifier_app.command("run")
def notifier_run(config: ConfigOpt = None, log_level: LogLevelOpt = None, log_format: LogFormatOpt = None) -> None:
    """Run the notifier alone (the streams worker also runs it unless notifier.enabled is false)."""
    from tailhound.kafka import ensure_topics

    from .receiver_set import build_receivers, notifier_config
    from .service import NotifierService

    settings = _settings(config)
    setup_logging(
        log_level, log_format, default_level=settings.streams.log_level, default_format=settings.streams.log_format
    )
    log_start("notifier", broker=settings.broker, api_listen=settings.notifier.api_listen or "off")
    cfg = notifier_config(settings)

    async def main() -> None:
        await ensure_topics(settings)
        service = NotifierService(settings, cfg, build_receivers(settings, cfg))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await service.run(stop)

    asyncio.run(main())


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
    from .config_check import check_file, check_secrets, is_error, label_space

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


routes_app = typer.Typer(help="The routing tree.", no_args_is_help=True)
notifier_app.add_typer(routes_app, name="routes")


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

    from .config_check import label_issues, label_space
    from .matchers import incident_labels
    from .route_trace import load_tree, read_incidents, receivers, render_tree, trace

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


# --- silences ------------------------------------------------------------------------------------
async def _write_state(settings: Settings, key: str, value: dict) -> None:
    from tailhound.kafka import ensure_topics, make_producer

    await ensure_topics(settings)
    producer = make_producer(settings)
    await producer.start()
    try:
        await producer.send_and_wait(settings.notifier_state_topic, key=key.encode(), value=json.dumps(value).encode())
    finally:
        await producer.stop()


def _state(settings: Settings) -> dict:
    from .state_topic import read_state

    items, _ = asyncio.run(read_state(settings))
    return items


@silence_app.command("add")
def silence_add(
    matcher: Annotated[
        list[str],
        typer.Option("--matcher", "-m", help='Label matcher, e.g. node="gpu-node-7" (repeatable; all must match).'),
    ],
    author: Annotated[str, typer.Option(help="Who silences.")],
    comment: Annotated[str, typer.Option(help="Why (a ticket, a maintenance).")],
    duration: Annotated[str | None, typer.Option(help="How long, e.g. 2h (default 1h).")] = None,
    until: Annotated[str | None, typer.Option(help="End time, ISO 8601 (instead of --duration).")] = None,
    starts_at: Annotated[str | None, typer.Option("--starts-at", help="Start time, ISO 8601 (default now).")] = None,
    config: ConfigOpt = None,
) -> None:
    """Create a silence; the active notifier applies it within a tick."""
    try:
        matchers = [Matcher.parse(m) for m in matcher]
    except ValueError as exc:
        raise TailhoundError(str(exc)) from exc
    now = time.time()
    start = _parse_time(starts_at) if starts_at else now
    if until and duration:
        raise TailhoundError("give --duration or --until, not both")
    end = _parse_time(until) if until else start + parse_duration(duration or "1h")
    if end <= start:
        raise TailhoundError("the silence must end after it starts")
    try:
        silence = Silence(
            matchers=matchers, starts_at=start, ends_at=end, author=author, comment=comment, created_at=now
        )
    except ValidationError as exc:  # the limits (tailhound.notifier.limits): matchers, text sizes, 30 days
        err = exc.errors()[0]
        raise TailhoundError(f"{'.'.join(map(str, err['loc'])) or 'silence'}: {err['msg']}") from None
    asyncio.run(_write_state(_settings(config), f"silence:{silence.id}", silence.model_dump(mode="json")))
    console.print(f"{silence.id}  {', '.join(map(str, matchers))}  until {_when(end)}")


@silence_app.command("list")
def silence_list(
    all_: Annotated[bool, typer.Option("--all", help="Include expired silences.")] = False,
    output: OutputOpt = "table",
    config: ConfigOpt = None,
) -> None:
    """List silences (active and pending; --all for expired ones too)."""
    now = time.time()
    silences = [
        Silence.model_validate(v) for k, v in _state(_settings(config)).items() if k.startswith("silence:") and v
    ]
    print_listing(silence_listing_of(silences, now, all_), output, console)


def silence_listing_of(silences: list[Silence], now: float, all_: bool = False) -> Listing:
    """`silences` (without the expired ones unless `all_`) as rows; json/yaml get each whole silence."""
    listing = Listing(["id", "state", "matchers", "starts", "ends", "author", "comment"], wide=["created"])
    for s in sorted(silences, key=lambda s: s.starts_at):
        if all_ or s.state(now) != "expired":
            listing.add(
                [
                    s.id,
                    s.state(now),
                    ", ".join(map(str, s.matchers)),
                    _when(s.starts_at),
                    _when(min(s.ends_at, s.expired_at or s.ends_at)),
                    s.author,
                    s.comment,
                ],
                [_when(s.created_at)],
                {"state": s.state(now), **s.model_dump(mode="json")},
            )
    return listing


@silence_app.command("expire")
def silence_expire(
    silence_id: Annotated[str, typer.Argument(help="Silence id (sil-...).")], config: ConfigOpt = None
) -> None:
    """End a silence now."""
    settings = _settings(config)
    value = _state(settings).get(f"silence:{silence_id}")
    if not value:
        raise TailhoundError(f"no silence {silence_id}")
    s = Silence.model_validate(value)
    if s.expired_at is None:
        s.expired_at = time.time()
        asyncio.run(_write_state(settings, f"silence:{s.id}", s.model_dump(mode="json")))
    console.print(f"{s.id} expired")


# --- incidents -----------------------------------------------------------------------------------
def _incident_events(settings: Settings) -> dict[str, list]:
    from tailhound.incident import IncidentEvent

    from .state_topic import read_topic

    by_id: dict[str, list] = {}
    for raw in asyncio.run(read_topic(settings, settings.incidents_topic)):
        try:
            ev = IncidentEvent.model_validate_json(raw)
        except ValueError:
            continue
        events = by_id.setdefault(ev.incident_id, [])
        if all(e.sequence != ev.sequence for e in events):
            events.append(ev)
    for events in by_id.values():
        events.sort(key=lambda e: e.sequence)
    return by_id


@incidents_app.command("list")
def incidents_list(
    all_: Annotated[bool, typer.Option("--all", help="Include resolved incidents.")] = False,
    output: OutputOpt = "table",
    config: ConfigOpt = None,
) -> None:
    """Open incidents (--all: every incident still on the topic), newest first."""
    by_id = _incident_events(_settings(config))
    print_listing(incident_listing_of([evs[-1] for evs in by_id.values()], all_), output, console)


def incident_listing_of(latest: list, all_: bool = False) -> Listing:
    """Each incident's latest event (open ones unless `all_`) as rows, newest first; json/yaml: the event."""
    listing = Listing(
        ["incident", "state", "root cause", "severity", "scope", "opened", "kind"],
        wide=["rule", "summary", "sequence", "last event"],
    )
    for ev in sorted(latest, key=lambda e: e.opened_at, reverse=True):
        state = "resolved" if ev.event == "resolved" else "open"
        if all_ or state == "open":
            listing.add(
                [
                    ev.incident_id,
                    state,
                    str(ev.root_cause),
                    str(ev.severity),
                    ev.scope.describe(),
                    _when(ev.opened_at),
                    "transient" if ev.transient else "persistent",
                ],
                [ev.rule, ev.summary, str(ev.sequence), _when(ev.ts)],
                {"state": state, **ev.model_dump(mode="json")},
            )
    return listing


@incidents_app.command("show")
def incidents_show(
    incident_id: Annotated[str, typer.Argument(help="Incident id (inc-...).")], config: ConfigOpt = None
) -> None:
    """An incident's lifecycle, evidence, actions and what was notified where."""
    from tailhound.console import render_incident

    settings = _settings(config)
    events = _incident_events(settings).get(incident_id)
    if not events:
        raise TailhoundError(f"no incident {incident_id} on {settings.incidents_topic}")
    console.print(render_incident(events[-1]))
    for ev in events:
        console.print(f"  #{ev.sequence} {ev.event:8s} {_when(ev.ts)}")
    # the live groups, and those the notifier is done with (kept for the console: notifier/history.py)
    groups = [
        GroupState.model_validate(v)
        for k, v in _state(settings).items()
        if k.startswith(("group:", RECENT_PREFIX)) and v
    ]
    for grp in groups:
        if incident_id not in grp.incidents:
            continue
        console.print(
            f"notification group {grp.group_id} ({grp.group_key}, {len(grp.incidents)} incidents)"
            + (f": {grp.suppressed}" if grp.suppressed else "")
            + (" [flapping]" if grp.flapping else "")
        )
        for name, log in grp.logs.items():
            pending = ", ".join(f"#{n.sequence} {n.kind}" for n in log.pending) or "none"
            err = f"; last error: {log.last_error}" if log.last_error else ""
            console.print(
                f"  {name}: delivered up to #{log.delivered} ({log.last_kind or '-'}), pending {pending}{err}"
            )
            for rec in log.history:
                at = _when(rec.at) if rec.at else "-"
                err = f" ({rec.error})" if rec.error else ""
                console.print(
                    f"    #{rec.sequence} {rec.kind:8s} created {_when(rec.created_at)}  {rec.outcome} {at}"
                    f"  attempts {rec.attempts}{err}"
                )
