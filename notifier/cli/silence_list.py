"""``tailhound silence list``: the silences on the notifier's state topic."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from tailhound.output import Listing, OutputOpt, print_listing

from ..state import Silence
from .common import ConfigOpt, broker_settings, console, silence_app, state_items, when


@silence_app.command("list")
def silence_list(
    all_: Annotated[bool, typer.Option("--all", help="Include expired silences.")] = False,
    output: OutputOpt = "table",
    config: ConfigOpt = None,
) -> None:
    """List silences (active and pending; --all for expired ones too)."""
    now = time.time()
    silences = [
        Silence.model_validate(v)
        for k, v in state_items(broker_settings(config)).items()
        if k.startswith("silence:") and v
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
                    when(s.starts_at),
                    when(min(s.ends_at, s.expired_at or s.ends_at)),
                    s.author,
                    s.comment,
                ],
                [when(s.created_at)],
                {"state": s.state(now), **s.model_dump(mode="json")},
            )
    return listing
