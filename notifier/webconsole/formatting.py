"""Text for the console's pages and charts (pure): escaping, numbers with units, UTC times, spans, entity names.

Everything shown comes from outside (label values, summaries, entity ids, units, silence comments): it goes
through :func:`safe_text` before it reaches HTML or SVG, which escapes it for element content and quoted
attributes alike and drops the control characters XML does not allow (an SVG must stay well-formed).
"""

from __future__ import annotations

import html
import math
import re
from datetime import UTC, datetime

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def safe_text(value: object) -> str:
    """`value` as text for HTML or SVG (content or a quoted attribute): escaped, without the control characters
    XML forbids."""
    return html.escape(_NOT_XML.sub("", str(value)), quote=True)


def format_value(v: float, unit: str = "") -> str:
    """A readable number: 1965, 0.953, 12.5k, 3.2G, 1.5e-07; the unit after it (a space before a word)."""
    a = abs(v)
    if not math.isfinite(v):
        text = "?"
    elif a == 0:
        text = "0"
    elif a >= 1e15 or a < 1e-3:
        text = f"{v:.2e}"
    elif a >= 1e4:
        factor, suffix = next((f, s) for f, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")) if a >= f)
        text = f"{v / factor:.3g}{suffix}"
    elif a >= 100:
        text = f"{v:.0f}"
    else:
        text = f"{v:.3g}"
    return text + (f" {unit}" if unit[:1].isalpha() else unit)


def format_clock(ts: float, seconds: bool = False) -> str:
    """HH:MM (or HH:MM:SS) UTC of unix time `ts`; ``?`` for a time no calendar holds."""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S" if seconds else "%H:%M")
    except (OverflowError, OSError, ValueError):
        return "?"


def format_time(ts: float | None) -> str:
    """``2024-06-01 00:05:00 UTC``; an em dash for None, ``?`` for a time no calendar holds."""
    if ts is None:
        return "—"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


def format_span(seconds: float) -> str:
    """90 -> 1m 30s, 7260 -> 2h 01m, 200000 -> 2d 7h."""
    s = int(max(seconds, 0.0)) if math.isfinite(seconds) else 0
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f" {s % 60:02d}s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def entity_label(per: str, entity: str, max_chars: int = 28) -> str:
    """What an entity is called on a chart: ``GPU 3``, ``engine 0``, else the entity itself (shortened)."""
    text = {"gpu": f"GPU {entity}", "engine": f"engine {entity}"}.get(per, entity)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def badge(cls: str, text: str) -> str:
    """A small labelled pill (severity, state, kind), styled by its class."""
    return f'<span class="badge {safe_text(cls)}">{safe_text(text)}</span>'
