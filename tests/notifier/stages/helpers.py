"""A stage context and groups built by hand, so one notify stage runs on its own."""

from __future__ import annotations

from typing import Any

from tailhound.notifier.config import parse_config
from tailhound.notifier.stages import Context
from tailhound.notifier.state import GroupState

from ..factories import T0, incident_event

CONFIG = """
grouping: {by: [root_cause, node], wait: 30s, interval: 5m, repeat: 4h}
flap: {window: 30m, max_flips: 2, min_flip_interval: 60s}
links: {dashboard: "https://grafana.example/d/fleet"}
"""


def context(now: float = T0 + 60, config: str = CONFIG, **kw: Any) -> Context:
    return Context(
        now=now, config=parse_config(config), groups={}, open_groups={}, incident_group={}, seen={}, silences={}, **kw
    )


def group(event: str = "opened", **state: Any) -> GroupState:
    """A group of one incident whose status follows the incident's last event."""
    ev = incident_event(event=event, sequence=1 if event == "opened" else 2)
    data: dict[str, Any] = dict(
        group_id=ev.incident_id,
        group_key="k",
        incidents={ev.incident_id: ev},
        created_at=T0,
        status="resolved" if event == "resolved" else "firing",
        status_since=T0,
        next_flush_at=T0 + 30,
    )
    data.update(state)
    return GroupState(**data)
