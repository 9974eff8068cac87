"""Block Kit rendering for the Slack receiver: one notification -> fallback text + blocks.

The content matches the console's rendering of an incident (:func:`tailhound.console.render_incident`):
root cause with its vocabulary title, severity, scope, transient/persistent, opened/resolved times,
evidence, suggested actions, and the incident id, rule and sequence. A group of related incidents also
lists its other members. Everything is cut to Slack's limits here (150 characters for a header, 3000
for a section text, 2000 for a field, 50 blocks), so Slack never answers ``invalid_blocks``.
Text taken from incidents (every mrkdwn field and the fallback ``text``) is escaped (``&``, ``<``, ``>``)
and its ``@channel``/``@here``/``@everyone`` words are broken with a zero-width joiner, and every mrkdwn
object is ``verbatim``, so a node named ``<!channel>`` cannot ping anyone or forge a link. Only the
operator's ``mention_on_critical`` is sent as a live mention.
"""

from __future__ import annotations

import re
from typing import Any

from tailhound.console import format_ts
from tailhound.incident import IncidentEvent
from tailhound.notifier.model import Notification
from tailhound.notifier.receivers import truncate
from tailhound.vocabulary import ROOT_CAUSES

MAX_BLOCKS = 50
HEADER_LIMIT = 150
SECTION_LIMIT = 3000
FIELD_LIMIT = 2000
TEXT_LIMIT = 3000  # the plain-text fallback; Slack allows more, but a notification preview needs no more
ITEM_LIMIT = 600  # one evidence line or action
MAX_RELATED = 10

SEVERITY_EMOJI = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}
RESOLVED_EMOJI = ":white_check_mark:"
FLAPPING_EMOJI = ":repeat:"

Block = dict[str, Any]

#: Words Slack may turn into a mention even without ``<!...>`` (non-verbatim text, ``link_names``).
_BARE_MENTION = re.compile(r"@(?=(channel|here|everyone)\b)", re.IGNORECASE)
_WORD_JOINER = "\u2060"


def escape(text: str) -> str:
    """`text` safe for Slack mrkdwn: no mentions, links or entities (``<!channel>`` shows as text)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BARE_MENTION.sub("@" + _WORD_JOINER, text)


def mrkdwn(text: str, limit: int) -> dict[str, Any]:
    """A verbatim mrkdwn text object: Slack links or mentions nothing we did not write as ``<...>``."""
    return {"type": "mrkdwn", "text": truncate(text, limit), "verbatim": True}


def format_duration(seconds: float) -> str:
    """``45s``, ``14m``, ``2h 05m``, ``3d 4h``."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def root_cause_label(ev: IncidentEvent) -> str:
    """```gpu-thermal-throttle` (GPU thermal throttle)`` in mrkdwn."""
    info = ROOT_CAUSES.get(ev.root_cause)
    return f"`{escape(str(ev.root_cause))}`" + (f" ({escape(info.title)})" if info else "")


def resolved_span(n: Notification) -> tuple[float, float]:
    """(opened, resolved) of the whole group: first opening, last resolution (the send time if unknown)."""
    opened = min(i.opened_at for i in n.incidents)
    resolved = max((i.resolved_at or n.ts) for i in n.incidents)
    return opened, max(resolved, opened)


def links_of(n: Notification, console_url: str | None) -> dict[str, str]:
    """The notification's links, plus the configured console URL when the notification has none."""
    links = dict(n.links)
    if console_url and "console" not in links:
        links["console"] = console_url
    return links


def capped_list(heading: str, items: list[str], limit: int = SECTION_LIMIT, max_items: int | None = None) -> str:
    """``heading`` then one line per item, cut so it fits `limit` with a closing ``…and N more``."""
    text = heading
    shown_max = len(items) if max_items is None else min(max_items, len(items))
    for i, item in enumerate(items[:shown_max]):
        line = "\n" + item
        rest = len(items) - i - 1
        reserve = len(f"\n…and {rest} more") if rest else 0
        if len(text) + len(line) + reserve > limit:
            return truncate(text + f"\n…and {len(items) - i} more", limit)
        text += line
    if shown_max < len(items):
        text += f"\n…and {len(items) - shown_max} more"
    return truncate(text, limit)


def _section(text: str) -> Block:
    return {"type": "section", "text": mrkdwn(text, SECTION_LIMIT)}


def _field(label: str, value: str) -> dict[str, str]:
    return mrkdwn(f"*{label}*\n{value}", FIELD_LIMIT)


def _state_emoji(n: Notification) -> str:
    if n.resolved:
        return RESOLVED_EMOJI
    if n.flapping:
        return FLAPPING_EMOJI
    return SEVERITY_EMOJI.get(n.severity, ":warning:")


def _fields(n: Notification) -> Block:
    lead = n.lead
    fields = [
        _field("Root cause", root_cause_label(lead)),
        _field("Severity", f"{SEVERITY_EMOJI.get(n.severity, '')} {n.severity}".strip()),
        _field("Scope", escape(lead.scope.describe())),
        _field("Nature", "transient" if n.transient else "persistent"),
        _field("Opened", format_ts(lead.opened_at)),
    ]
    if n.resolved:
        opened, resolved = resolved_span(n)
        fields.append(_field("Resolved", f"{format_ts(resolved)} (after {format_duration(resolved - opened)})"))
    else:
        fields.append(_field("Firing for", format_duration(max(n.ts - lead.opened_at, 0))))
    if n.flapping:
        fields.append(_field("Flapping", f"{FLAPPING_EMOJI} state changed too often; not re-paged"))
    return {"type": "section", "fields": fields}


def _related(n: Notification) -> str:
    lines = []
    for ev in n.incidents[1:]:
        state = "resolved" if ev.event == "resolved" else "firing"
        lines.append(
            truncate(
                f"• {SEVERITY_EMOJI.get(ev.severity, '')} {root_cause_label(ev)} — "
                f"{escape(ev.scope.describe())} — {state}",
                ITEM_LIMIT,
            )
        )
    return capped_list(f"*Related incidents ({len(n.incidents) - 1})*", lines, max_items=MAX_RELATED)


def _links(links: dict[str, str]) -> str:
    def link(name: str, url: str) -> str:
        safe = escape(url).replace("|", "%7C")
        return f"<{safe}|{escape(name.replace('_', ' ').capitalize())}>"

    return " · ".join(link(name, url) for name, url in links.items())


def _context(n: Notification) -> Block:
    lead = n.lead
    text = (
        f"incident `{escape(lead.incident_id)}` #{lead.sequence} · rule `{escape(lead.rule)}` · "
        f"notification #{n.sequence}"
    )
    if n.group_id != lead.incident_id:
        text += f" · group `{escape(n.group_id)}`"
    return {"type": "context", "elements": [mrkdwn(text, SECTION_LIMIT)]}


def differential_text(ev: IncidentEvent) -> str:
    """The lead, the runner-up, why the signals do not separate them and the check that does (mrkdwn)."""
    d = ev.differential
    assert d is not None
    text = (
        f"*Not certain: {escape(str(d.lead))} or {escape(str(d.runner_up))}* — {escape(d.why)}\n"
        f"*Tell them apart:* {escape(d.check)}"
    )
    return truncate(text, SECTION_LIMIT)


def render_message(
    n: Notification, *, mention: str | None = None, console_url: str | None = None
) -> tuple[str, list[Block]]:
    """The channel message for the group's current state: (fallback text, blocks).

    `mention` (``<!here>``) is put in front when the group is critical, firing and not flapping.
    A resolved message is short: state, times and duration, no evidence or actions.
    """
    title = n.title()  # plain_text in the header (Slack parses nothing there); escaped where it is mrkdwn
    header = f"{_state_emoji(n)} {title}"
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(header, HEADER_LIMIT), "emoji": True}}
    ]
    text = truncate(escape(title), TEXT_LIMIT)
    if mention and n.severity == "critical" and not n.resolved and not n.flapping:
        blocks.append(_section(f"{mention} critical incident"))
        text = truncate(f"{mention} {escape(title)}", TEXT_LIMIT)
    if len(header) > HEADER_LIMIT and n.lead.summary:
        blocks.append(_section(escape(n.lead.summary)))
    blocks.append(_fields(n))
    lead = n.lead
    if not n.resolved:
        if lead.differential is not None:
            blocks.append(_section(differential_text(lead)))
        if lead.evidence:
            items = [truncate("• " + escape(e.describe()), ITEM_LIMIT) for e in lead.evidence]
            blocks.append(_section(capped_list("*Evidence*", items)))
        if lead.actions:
            items = [truncate(f"{i}. {escape(a)}", ITEM_LIMIT) for i, a in enumerate(lead.actions, 1)]
            blocks.append(_section(capped_list("*Suggested actions*", items)))
        if len(n.incidents) > 1:
            blocks.append(_section(_related(n)))
    elif len(n.incidents) > 1:
        blocks.append(_section(f"All {len(n.incidents)} incidents of the group are resolved."))
    links = links_of(n, console_url)
    if links:
        blocks.append(_section(truncate(_links(links), SECTION_LIMIT)))
    blocks.append(_context(n))
    return text, blocks[:MAX_BLOCKS]


def render_reply(n: Notification) -> tuple[str, list[Block]]:
    """The thread reply saying what changed since the last message: (fallback text, blocks)."""
    if n.resolved:
        opened, resolved = resolved_span(n)
        took = format_duration(resolved - opened)
        plain = f"Resolved after {took}"
        body = f"{RESOLVED_EMOJI} *Resolved* after {took} — {format_ts(resolved)}"
        if len(n.incidents) > 1:
            body += f"\nAll {len(n.incidents)} incidents of the group are resolved."
        return plain, [_section(body)]
    newest = max(n.incidents, key=lambda ev: ev.ts)
    verb = "Opened again" if n.kind == "opened" else "Updated"
    plain = escape(f"{verb}: {newest.event} {newest.root_cause} on {newest.scope.describe()}")
    body = (
        f"{SEVERITY_EMOJI.get(newest.severity, '')} *{verb}* (notification #{n.sequence}): {newest.event} "
        f"{root_cause_label(newest)} on {escape(newest.scope.describe())}, severity {newest.severity}"
    )
    if len(n.incidents) > 1:
        body += f"\nThe group now has {len(n.incidents)} incidents (highest severity {n.severity})."
    if n.flapping:
        body += f"\n{FLAPPING_EMOJI} Flapping: state changed too often; not re-paged."
    items = [truncate("• " + escape(e.describe()), ITEM_LIMIT) for e in newest.evidence]
    if items:
        body = capped_list(body + "\n*Evidence*", items)
    return truncate(plain, TEXT_LIMIT), [_section(body)]
