"""Server-rendered SVG charts of an incident's evidence (pure: no JS library, nothing fetched at run time):
:func:`timeline_svg` (the focus entities over time against baseline, threshold, ``for`` window and lifecycle
marks) and :func:`peer_svg` (the incident's entities against their peers, with their latest values).

Both read an :class:`~tailhound.incident.EvidenceSeries` as it comes off the wire: gaps, NaN and infinities
break a line, huge values are clamped, times sorted, entities cut at
:data:`~tailhound.incident.MAX_SERIES_ENTITIES`; :mod:`.chart_frame` keeps every coordinate inside the drawing.
"""

from __future__ import annotations

from tailhound.incident import MAX_SERIES_ENTITIES, EvidenceSeries
from tailhound.notifier.webconsole.chart_frame import (
    MARK_COLOURS,
    MUTED_COLOUR,
    PEER_COLOUR,
    STRIP_HEIGHT,
    THRESHOLD_COLOUR,
    Frame,
    Point,
    finite,
)
from tailhound.notifier.webconsole.formatting import entity_label, format_span, format_value, safe_text
from tailhound.notifier.webconsole.view import Mark

#: how the legend names a baseline, by what it is (EvidenceSeries.baseline_of)
BASELINE_NAMES = {
    "peers": "median of its peers",
    "rolling": "usual level (rolling baseline)",
    "load-model": "expected at this load (load model)",
}
#: the incident's own entities in the timeline (distinct hues; the baseline repeats its entity's hue, dashed)
FOCUS_COLOURS = ("#0969da", "#8250df", "#1b7c83", "#bf3989", "#9a6700", "#57606a")
#: the incident's own entities in the peer view: red and orange against grey peers
HOT_COLOURS = ("#d1242f", "#e16f24", "#a40e26", "#fb8f44")
FOR_WINDOW_FILL = "#d4a72c"


def timeline_svg(series: EvidenceSeries, marks: list[Mark], *, width: int = 720, height: int = 220) -> str:
    """The focus entities' values over time against their baselines, the threshold, the ``for`` window and the
    lifecycle `marks`; a "no data" placeholder when the series holds no value."""
    frame = Frame(series, width, height)
    entities = [e for e in (series.focus or list(series.values)) if e in series.values or e in series.baseline]
    entities = entities[:MAX_SERIES_ENTITIES]
    lines = {e: frame.points(series.values.get(e, [])) for e in entities}
    baselines = {e: frame.points(series.baseline[e]) for e in entities if e in series.baseline}
    threshold = finite(series.threshold)
    names = ", ".join(entity_label(series.per, e) for e in entities) or "no entity"
    title = f"{series.signal}{f' ({series.unit})' if series.unit else ''}: {names}"
    aria = f"Timeline of {series.signal} for {names}"
    if threshold is not None:
        aria += f", threshold {series.op} {format_value(threshold, series.unit)}"
    aria += f", {len(marks)} lifecycle marks"
    values = [v for pts in (*lines.values(), *baselines.values()) for _, v in pts if v is not None]
    if not values:
        return frame.placeholder("timeline-chart", title, aria)
    if threshold is not None:
        values.append(threshold)
    times = [t for pts in lines.values() for t, _ in pts] + [t for pts in baselines.values() for t, _ in pts]
    window = _for_window(series)
    times += list(window or ()) + [m.ts for m in marks if finite(m.ts) is not None]
    legend = [
        (FOCUS_COLOURS[i % len(FOCUS_COLOURS)], "line", entity_label(series.per, e)) for i, e in enumerate(entities)
    ]
    if baselines:
        legend.append((MUTED_COLOUR, "dash", BASELINE_NAMES.get(getattr(series, "baseline_of", ""), "baseline")))
    if threshold is not None:
        legend.append((THRESHOLD_COLOUR, "dots", f"threshold {series.op} {format_value(threshold, series.unit)}"))
    if window:
        legend.append((FOR_WINDOW_FILL, "box", f"for {format_span(series.for_s)}"))
    legend += [(MARK_COLOURS[k], "mark", k) for k in MARK_COLOURS if any(m.kind == k for m in marks)]
    frame.layout(times, values, legend_items=legend)
    out = frame.open("timeline-chart", title, aria) + frame.axes()
    if window:
        x0, x1 = frame.x(window[0]), frame.x(window[1])
        out.append(
            f'<rect class="for-window" x="{x0:.1f}" y="{frame.top:.1f}" width="{max(x1 - x0, 1.0):.1f}" '
            f'height="{frame.bottom - frame.top:.1f}" fill="{FOR_WINDOW_FILL}" fill-opacity="0.18">'
            f"<title>{safe_text(f'for window: the condition must hold {format_span(series.for_s)}')}"
            "</title></rect>"
        )
    if threshold is not None:
        out.append(frame.threshold(threshold, f"threshold {series.op} {format_value(threshold, series.unit)}"))
    for i, e in enumerate(entities):
        colour, label = FOCUS_COLOURS[i % len(FOCUS_COLOURS)], entity_label(series.per, e)
        if e in baselines:
            out.append(
                frame.line(baselines[e], colour, 1.25, "baseline-line", e, f"{label} baseline", dash="5 4", opacity=0.7)
            )
        out.append(frame.line(lines[e], colour, 2.0, "series-line", e, _latest_title(label, lines[e], series.unit)))
    out.append(frame.marks(marks))
    out.append(frame.legend(legend))
    return "".join(out) + "</svg>"


def peer_svg(series: EvidenceSeries, *, width: int = 720, height: int = 220) -> str:
    """Every entity of `series` over time, the focus entities thick red/orange, their peers thin grey and
    labelled, with the latest value of each in a strip of bars below (:data:`STRIP_HEIGHT` more pixels)."""
    frame = Frame(series, width, height, right=92, extra=STRIP_HEIGHT)
    focus = [e for e in series.focus if e in series.values]
    entities = (focus + [e for e in series.values if e not in focus])[:MAX_SERIES_ENTITIES]
    lines = {e: frame.points(series.values[e]) for e in entities}
    peers = [e for e in entities if e not in focus]
    names = ", ".join(entity_label(series.per, e) for e in focus) or "no focus entity"
    title = f"{series.signal}{f' ({series.unit})' if series.unit else ''}: {names} against {len(peers)} peers"
    aria = f"Peer view of {series.signal}: {names} highlighted against {len(peers)} peers"
    values = [v for pts in lines.values() for _, v in pts if v is not None]
    if not values:
        return frame.placeholder("peer-chart", title, aria)
    threshold = finite(series.threshold)
    if threshold is not None:
        values.append(threshold)
    frame.layout([t for pts in lines.values() for t, _ in pts], values)
    out = frame.open("peer-chart", title, aria) + frame.axes()
    if threshold is not None:
        out.append(frame.threshold(threshold, f"threshold {series.op} {format_value(threshold, series.unit)}"))
    colour = {e: HOT_COLOURS[i % len(HOT_COLOURS)] for i, e in enumerate(focus)}
    for e in peers + focus:  # the incident's own on top
        hot = e in colour
        label = entity_label(series.per, e)
        out.append(
            frame.line(
                lines[e],
                colour.get(e, PEER_COLOUR),
                2.5 if hot else 1.0,
                "focus-line" if hot else "peer-line",
                e,
                _latest_title(label, lines[e], series.unit),
                opacity=1.0 if hot else 0.8,
            )
        )
    ends = [(frame.y(pts[-1][1]), e) for e in entities if (pts := [p for p in lines[e] if p[1] is not None])]
    for y, e in _spread(ends, frame.top + 4, frame.bottom, 11.0):
        weight = ' font-weight="600"' if e in colour else ""
        out.append(
            f'<text class="entity-label" x="{frame.right + 6:.1f}" y="{y + 4:.1f}" '
            f'fill="{colour.get(e, MUTED_COLOUR)}"{weight}>'
            f"{safe_text(entity_label(series.per, e, 12))}</text>"
        )
    out.append(frame.latest_strip(entities, lines, colour))
    return "".join(out) + "</svg>"


def _for_window(series: EvidenceSeries) -> tuple[float, float] | None:
    start, length = finite(series.pending_since), finite(series.for_s)
    if start is None or not length or length <= 0:
        return None
    return start, start + length


def _latest_title(label: str, pts: list[Point], unit: str) -> str:
    last = next((v for _, v in reversed(pts) if v is not None), None)
    return f"{label}: latest {format_value(last, unit)}" if last is not None else f"{label}: no value"


def _spread(items: list[tuple[float, str]], lo: float, hi: float, gap: float) -> list[tuple[float, str]]:
    """Labels at their y, pushed apart to `gap` pixels (less when they would not fit) within [lo, hi]."""
    gap = min(gap, (hi - lo) / max(len(items) - 1, 1))
    placed: list[tuple[float, str]] = []
    for y, e in sorted(items):
        placed.append((max(y, lo, placed[-1][0] + gap if placed else lo), e))
    overflow = placed[-1][0] - hi if placed else 0.0
    if overflow > 0:  # the stack ran past the bottom: lift it
        placed = [(max(y - overflow, lo), e) for y, e in placed]
    return placed
