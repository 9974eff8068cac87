"""``tailhound incidents show``: one incident's lifecycle joined with what was notified where."""

from __future__ import annotations

from typing import Annotated

import typer

from tailhound.errors import TailhoundError

from ..history import RECENT_PREFIX
from ..state import GroupState
from ..state_topic import incident_events
from .common import ConfigOpt, broker_settings, console, incidents_app, state_items, when


@incidents_app.command("show")
def incidents_show(
    incident_id: Annotated[str, typer.Argument(help="Incident id (inc-...).")], config: ConfigOpt = None
) -> None:
    """An incident's lifecycle, evidence, actions and what was notified where."""
    from tailhound.console import render_incident

    settings = broker_settings(config)
    events = incident_events(settings).get(incident_id)
    if not events:
        raise TailhoundError(f"no incident {incident_id} on {settings.incidents_topic}")
    console.print(render_incident(events[-1]))
    for ev in events:
        console.print(f"  #{ev.sequence} {ev.event:8s} {when(ev.ts)}")
    # the live groups, and those the notifier is done with (kept for the console: notifier/history.py)
    groups = [
        GroupState.model_validate(v)
        for k, v in state_items(settings).items()
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
                at = when(rec.at) if rec.at else "-"
                err = f" ({rec.error})" if rec.error else ""
                console.print(
                    f"    #{rec.sequence} {rec.kind:8s} created {when(rec.created_at)}  {rec.outcome} {at}"
                    f"  attempts {rec.attempts}{err}"
                )
