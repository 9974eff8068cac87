"""What the notifier's command modules share: their Typer apps, the consoles, the settings option, times,
and the state topic as the CLI reads and writes it.

Silences are written straight to the notifier's state topic (key ``silence:<id>``), where the active
notifier picks them up within a tick and where they survive restarts.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from tailhound.errors import TailhoundError
from tailhound.output import make_console
from tailhound.settings import Settings, load_settings

console = make_console()  # piped: ids, matchers and panels whole, never cut at 80 columns
err_console = make_console(stderr=True)
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file (else $TAILHOUND_CONFIG).")]

# -h as --help comes from the root app (tailhound.cli): click hands help_option_names down to subcommands
notifier_app = typer.Typer(help="Run or check the notifier.", no_args_is_help=True)
silence_app = typer.Typer(help="Silence incidents by label matchers.", no_args_is_help=True)
incidents_app = typer.Typer(help="Incidents and what was notified about them.", no_args_is_help=True)
routes_app = typer.Typer(help="The routing tree.", no_args_is_help=True)
notifier_app.add_typer(routes_app, name="routes")


def broker_settings(config: Path | None) -> Settings:
    """Settings from `config`; a TailhoundError when they name no broker (every command here needs one)."""
    s = load_settings(config)
    if not s.broker:
        raise TailhoundError("no broker configured (set TAILHOUND_BROKER=kafka://host:9092)")
    return s


def when(ts: float | None) -> str:
    """`ts` as a UTC time for people, "-" for none."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "-"


def parse_time(text: str) -> float:
    """An ISO 8601 time with a time zone, as a Unix timestamp."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TailhoundError(f"invalid time {text!r}: use ISO 8601, e.g. 2026-12-01T02:00:00Z") from exc
    if dt.tzinfo is None:
        raise TailhoundError(f"time {text!r} needs a time zone (e.g. ...Z or +01:00)")
    return dt.timestamp()


async def write_state(settings: Settings, key: str, value: dict) -> None:
    """Write one key of the notifier's state topic (creating the topics if needed)."""
    from tailhound.kafka import ensure_topics, make_producer

    await ensure_topics(settings)
    producer = make_producer(settings)
    await producer.start()
    try:
        await producer.send_and_wait(settings.notifier_state_topic, key=key.encode(), value=json.dumps(value).encode())
    finally:
        await producer.stop()


def state_items(settings: Settings) -> dict:
    """Every key of the notifier's state topic with its latest value."""
    from ..state_topic import read_state

    items, _ = asyncio.run(read_state(settings))
    return items
