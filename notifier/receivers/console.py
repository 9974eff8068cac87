"""The console receiver: prints each notification for a person at a terminal (the demo uses it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from rich.console import Console

from tailhound.console import render_incident
from tailhound.notifier.model import Notification, Receipt
from tailhound.output import make_console


class ConsoleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["console"]
    name: str


class ConsoleReceiver:
    """Renders the group's lead incident (as the worker's console does) with the notification title."""

    def __init__(self, config: ConsoleConfig, console: Console | None = None, origin: float | None = None) -> None:
        self.name = config.name
        self.console = console or make_console()  # piped (a worker log): panels whole, not cut at 80
        self.origin = origin
        self.sent: list[Notification] = []

    async def send(self, notification: Notification, receipt: Receipt | None) -> Receipt:
        self.sent.append(notification)
        self.console.print(f"[bold]notify[/] {notification.receiver}: {notification.title()}")
        if notification.kind != "updated" or len(self.sent) == 1:
            self.console.print(render_incident(notification.lead, self.origin, kind=notification.kind))
        related = notification.incidents[1:]
        for ev in related[:10]:
            self.console.print(f"  related: {ev.root_cause} {ev.scope.describe()} ({ev.incident_id})")
        if len(related) > 10:
            self.console.print(f"  ... and {len(related) - 10} more")
        return {}

    async def close(self) -> None:
        return None
