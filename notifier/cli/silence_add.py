"""``tailhound silence add``: a silence by label matchers, written to the notifier's state topic."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from pydantic import ValidationError

from tailhound.durations import parse_duration
from tailhound.errors import TailhoundError

from ..matchers import Matcher
from ..state import Silence
from .common import ConfigOpt, broker_settings, console, parse_time, silence_app, when, write_state


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
    start = parse_time(starts_at) if starts_at else now
    if until and duration:
        raise TailhoundError("give --duration or --until, not both")
    end = parse_time(until) if until else start + parse_duration(duration or "1h")
    if end <= start:
        raise TailhoundError("the silence must end after it starts")
    try:
        silence = Silence(
            matchers=matchers, starts_at=start, ends_at=end, author=author, comment=comment, created_at=now
        )
    except ValidationError as exc:  # the limits (tailhound.notifier.limits): matchers, text sizes, 30 days
        err = exc.errors()[0]
        raise TailhoundError(f"{'.'.join(map(str, err['loc'])) or 'silence'}: {err['msg']}") from None
    asyncio.run(write_state(broker_settings(config), f"silence:{silence.id}", silence.model_dump(mode="json")))
    console.print(f"{silence.id}  {', '.join(map(str, matchers))}  until {when(end)}")
