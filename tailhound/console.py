"""Incident events rendered for a person at a terminal (rich): the worker's console sink, and the panel the
notifier's console receiver reuses."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from tailhound.incident import IncidentEvent
from tailhound.output import make_console
from tailhound.vocabulary import ROOT_CAUSES

_STYLE = {"opened": "bold red", "updated": "bold yellow", "resolved": "bold green"}
_SEVERITY_STYLE = {"critical": "red", "warning": "yellow", "info": "cyan"}


def format_ts(ts: float, origin: float | None = None) -> str:
    wall = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if origin is None:
        return wall
    rel = max(ts - origin, 0)
    return f"{wall} (fleet time +{int(rel // 3600):d}:{int(rel % 3600 // 60):02d}:{int(rel % 60):02d})"


def render_incident(ev: IncidentEvent, origin: float | None = None, kind: str | None = None) -> Panel:
    """`ev` as a panel; `kind` overrides the lifecycle word in the title (a notification that gathered
    the opening and the first updates of an incident is its page: OPENED)."""
    kind = kind or ev.event
    info = ROOT_CAUSES.get(ev.root_cause)
    head = Text()
    head.append(f"root cause  {ev.root_cause}", style="bold")
    if info:
        head.append(f"  ({info.title})")
    head.append("\nseverity    ")
    head.append(ev.severity, style=_SEVERITY_STYLE.get(ev.severity, ""))
    head.append("  transient" if ev.transient else "  persistent")
    head.append(f"\nscope       {ev.scope.describe()}")
    head.append(f"\nopened      {format_ts(ev.opened_at, origin)}")
    if ev.resolved_at:
        head.append(f"\nresolved    {format_ts(ev.resolved_at, origin)}  (after {ev.resolved_at - ev.opened_at:.0f}s)")
    head.append(f"\nincident    {ev.incident_id} #{ev.sequence}  rule {ev.rule}")
    parts: list[Text] = [head]
    if ev.differential is not None and kind != "resolved":  # the look-alike the signals cannot rule out
        d = ev.differential
        parts.append(Text(f"not certain  {d.lead} or {d.runner_up}: {d.why}\ntell apart   {d.check}", style="yellow"))
    if ev.evidence and kind != "resolved":
        ev_text = Text("evidence", style="bold")
        for e in ev.evidence:
            ev_text.append(f"\n  - {e.describe()}")
        parts.append(ev_text)
    if ev.actions and kind != "resolved":
        act = Text("suggested actions", style="bold")
        for i, a in enumerate(ev.actions, 1):
            act.append(f"\n  {i}. {a}")
        parts.append(act)
    title = f"[{_STYLE[kind]}]{kind.upper()}[/] {escape(ev.summary)}"  # the summary carries telemetry text
    # fitted, not expanded: piped output is laid out PIPE_WIDTH wide (tailhound.output) and a panel that filled
    # it would pad every line to thousands of columns; on a terminal it still wraps at the terminal's width
    return Panel(Group(*parts), title=title, title_align="left", border_style=_STYLE[kind].split()[-1], expand=False)


class ConsoleSink:
    """The worker's console sink (``sinks.console``): prints every incident event it is given once and
    remembers what it printed for a summary. Not a notifier receiver (those take notifications)."""

    def __init__(self, console: Console | None = None, origin: float | None = None) -> None:
        self.console = console or make_console()
        self.origin = origin
        self.events: list[IncidentEvent] = []
        self._seen: set[tuple[str, int]] = set()

    def deliver(self, ev: IncidentEvent) -> bool:
        """Print `ev` unless this (incident, sequence) was printed already. True when printed."""
        key = (ev.incident_id, ev.sequence)
        if key in self._seen:
            return False
        self._seen.add(key)
        self.events.append(ev)
        self.console.print(render_incident(ev, self.origin))
        return True
