"""The console receiver: prints each notification for a person at a terminal (the demo uses it).

Text from incidents is printed as text: never parsed as rich markup (``[link=...]``, ``[blink]``), and
stripped of control characters, so a node name cannot send escape sequences (clear the screen, set the
window title, forge a hyperlink) to whoever watches the terminal.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.segment import Segment, Segments

from tailhound.console import render_incident
from tailhound.notifier.model import Notification, Receipt
from tailhound.output import make_console

#: C0 controls but newline and tab, DEL and C1 controls (ESC starts every terminal escape sequence).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(console: Console, renderable: RenderableType) -> Segments:
    """`renderable` rendered for `console`, with the control characters of its text removed (rich's own
    style codes are added later, when the segments are written)."""
    return Segments(
        s if s.control else Segment(_CONTROL.sub("", s.text), s.style)
        for s in console.render(renderable, console.options)
    )


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
        self._print(f"[bold]notify[/] {escape(notification.receiver)}: {escape(notification.title())}")
        if notification.kind != "updated" or len(self.sent) == 1:
            self._print(render_incident(notification.lead, self.origin, kind=notification.kind))
        related = notification.incidents[1:]
        for ev in related[:10]:
            self._print(
                f"  related: {escape(str(ev.root_cause))} {escape(ev.scope.describe())} ({escape(ev.incident_id)})"
            )
        if len(related) > 10:
            self.console.print(f"  ... and {len(related) - 10} more")
        return {}

    def _print(self, renderable: RenderableType) -> None:
        self.console.print(printable(self.console, renderable))

    async def close(self) -> None:
        return None
