"""``tailhound incidents list``: the incidents on the incidents topic, newest first."""

from __future__ import annotations

from typing import Annotated

import typer

from tailhound.output import Listing, OutputOpt, print_listing

from ..state_topic import incident_events
from .common import ConfigOpt, broker_settings, console, incidents_app, when


@incidents_app.command("list")
def incidents_list(
    all_: Annotated[bool, typer.Option("--all", help="Include resolved incidents.")] = False,
    output: OutputOpt = "table",
    config: ConfigOpt = None,
) -> None:
    """Open incidents (--all: every incident still on the topic), newest first."""
    by_id = incident_events(broker_settings(config))
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
                    when(ev.opened_at),
                    "transient" if ev.transient else "persistent",
                ],
                [ev.rule, ev.summary, str(ev.sequence), when(ev.ts)],
                {"state": state, **ev.model_dump(mode="json")},
            )
    return listing
