"""The console receiver prints telemetry text as text: no rich markup parsed, no escape sequence passed on."""

from __future__ import annotations

import io

from rich.console import Console

from tailhound.notifier.receivers.console import ConsoleConfig, ConsoleReceiver
from tests.notifier.factories import incident_event, notification

ESC = "\x1b"


async def test_markup_and_escape_sequences_in_names_reach_the_terminal_as_text():
    out = io.StringIO()
    receiver = ConsoleReceiver(
        ConsoleConfig(type="console", name="c"),
        console=Console(file=out, force_terminal=True, color_system=None, width=300),
    )
    lead = incident_event(
        node=f"[link=https://evil.example]n[/link]{ESC}]8;;https://x{ESC}\\",
        summary=f"[blink]boom[/blink] {ESC}[2J{ESC}]0;pwned\x07",
    )
    related = incident_event(incident_id="inc-rel", node=f"[bold]rel[/bold]{ESC}[31m")
    await receiver.send(notification("opened", incidents=[lead, related]), None)
    text = out.getvalue()
    assert ESC not in text and "\x07" not in text  # color_system=None: rich itself writes no codes either
    for literal in ("[link=https://evil.example]n[/link]", "[blink]boom[/blink]", "[bold]rel[/bold]"):
        assert literal in text, literal
