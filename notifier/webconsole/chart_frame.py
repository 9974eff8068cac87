"""The drawing area of one SVG chart (:class:`Frame`): margins, time and value domains, round ticks, and the
pieces the console's charts are drawn from (axes, lines broken at gaps, threshold, marks, legend, a strip of
latest values). Every coordinate it writes is finite and inside the drawing; every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tailhound.incident import EvidenceSeries
from tailhound.notifier.webconsole.formatting import entity_label, format_clock, format_value, safe_text
from tailhound.notifier.webconsole.view import Mark

MARK_COLOURS = {"opened": "#cf222e", "updated": "#bc4c00", "resolved": "#1a7f37"}
PEER_COLOUR = "#8c959f"
THRESHOLD_COLOUR = "#cf222e"
GRID_COLOUR, AXIS_COLOUR, TEXT_COLOUR, MUTED_COLOUR = "#eaeef2", "#8c959f", "#1f2328", "#656d76"
#: height of the peer view's strip of latest values, under its line chart
STRIP_HEIGHT = 64
#: values beyond this magnitude are drawn at it (so spans and paddings stay finite)
VALUE_LIMIT = 1e300
#: presentation attributes, not a style attribute: the console's CSP allows no inline style
_FONT_FAMILY = "system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"
#: a white outline under a label drawn over lines
_HALO = ' stroke="#ffffff" stroke-width="3" paint-order="stroke"'
_CHAR_W = 6.2  # rough width of an 11 px character, for legend and label layout
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


Point = tuple[float, float | None]


def finite(v: float | None) -> float | None:
    """`v` when it is a finite number (clamped to +-VALUE_LIMIT, tiny magnitudes to 0), else None."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    v = float(v)
    return 0.0 if abs(v) < 1e-250 else max(-VALUE_LIMIT, min(VALUE_LIMIT, v))


def _value_domain(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-9:  # constant (or as good as): centre it
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    return lo - pad, hi + pad


def _value_ticks(lo: float, hi: float, n: int) -> list[float]:
    raw = (hi - lo) / max(n, 1)
    if not math.isfinite(raw) or raw <= 0:
        return [lo, hi]
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag * (1 + 1e-12))
    if step <= 0 or not math.isfinite(step):
        return [lo, hi]
    first = math.ceil(lo / step) * step
    ticks = [first + i * step for i in range(12)]
    return [t for t in ticks if t <= hi] or [lo, hi]


def _time_ticks(lo: float, hi: float, n: int) -> tuple[list[float], bool]:
    """Ticks on round clock times, and whether they need seconds."""
    span = hi - lo
    step = next((s for s in _TIME_STEPS if span / s <= n), None)
    if step is None:
        step = 86400 * math.ceil(span / n / 86400)
    first = math.ceil(lo / step) * step
    return [t for t in (first + i * step for i in range(n + 2)) if t <= hi], step < 60


class Frame:
    """The drawing area of one chart: margins, the time and value domains, and the SVG pieces drawn on it."""

    def __init__(self, series: EvidenceSeries, width: int, height: int, right: float = 16.0, extra: int = 0) -> None:
        self.series = series
        self.width, self.height = max(int(width), 240), max(int(height), 120)
        self.full_height = self.height + extra
        self.left, self.right = 62.0, self.width - right
        self.top, self.bottom = 22.0, self.height - 28.0
        self.t0, self.t1, self.v0, self.v1 = 0.0, 1.0, 0.0, 1.0
        self.legend_rows: list[list[tuple[str, str, str, float]]] = []
        self.value_ticks: list[tuple[float, str]] = []
        self.unit = series.unit[:12]
        order = sorted((i for i, t in enumerate(series.ts) if finite(t) is not None), key=series.ts.__getitem__)
        self.order = order

    def points(self, values: Sequence[float | None]) -> list[Point]:
        """(time, value or None) in time order, for the series' times that have a slot in `values`."""
        return [(finite(self.series.ts[i]) or 0.0, finite(values[i]) if i < len(values) else None) for i in self.order]

    def layout(
        self, times: Iterable[float], values: Sequence[float], legend_items: Sequence[tuple[str, str, str]] = ()
    ) -> None:
        times = [t for t in (finite(t) for t in times) if t is not None]
        self.t0, self.t1 = min(times), max(times)
        if self.t1 - self.t0 < 1.0:
            self.t0, self.t1 = self.t0 - 60.0, self.t1 + 60.0
        self.v0, self.v1 = _value_domain(values)
        rows: list[list[tuple[str, str, str, float]]] = [[]]
        x = 12.0
        for colour, kind, label in legend_items:
            w = 26 + len(label) * _CHAR_W
            if rows[-1] and x + w > self.width - 8:
                rows.append([])
                x = 12.0
            rows[-1].append((colour, kind, label, x))
            x += w + 12
        self.legend_rows = rows[:3] if legend_items else []
        self.bottom = self.height - 28.0 - 15.0 * len(self.legend_rows)
        ticks = _value_ticks(self.v0, self.v1, max(int((self.bottom - self.top) // 28), 3))
        self.value_ticks = [(v, format_value(v, self.unit)) for v in ticks]
        widest = max((len(label) for _, label in self.value_ticks), default=4)
        self.left = min(max(14.0 + widest * _CHAR_W, 40.0), 140.0)

    def x(self, t: float) -> float:
        pos = self.left + (t - self.t0) / (self.t1 - self.t0) * (self.right - self.left)
        return min(max(pos, self.left), self.right) if math.isfinite(pos) else self.left

    def y(self, v: float) -> float:
        pos = self.bottom - (v - self.v0) / (self.v1 - self.v0) * (self.bottom - self.top)
        return min(max(pos, self.top), self.bottom) if math.isfinite(pos) else self.bottom

    def open(self, testid: str, title: str, aria: str) -> list[str]:
        s = self.series
        return [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" data-testid="{testid}" '
            f'data-signal="{safe_text(s.signal)}" aria-label="{safe_text(aria)}" width="{self.width}" '
            f'height="{self.full_height}" viewBox="0 0 {self.width} {self.full_height}" '
            f'font-family="{_FONT_FAMILY}" font-size="11">'
            f"<title>{safe_text(title)}</title>"
            f'<rect x="0" y="0" width="{self.width}" height="{self.full_height}" fill="#ffffff"/>'
        ]

    def placeholder(self, testid: str, title: str, aria: str) -> str:
        mid_x, mid_y = self.width / 2, self.height / 2
        return "".join(self.open(testid, title, f"{aria}: no data")) + (
            f'<rect x="{self.left:.1f}" y="{self.top:.1f}" width="{self.right - self.left:.1f}" '
            f'height="{self.bottom - self.top:.1f}" fill="#f6f8fa" stroke="{GRID_COLOUR}"/>'
            f'<text class="no-data" x="{mid_x:.1f}" y="{mid_y:.1f}" text-anchor="middle" fill="{MUTED_COLOUR}">'
            f"no data for {safe_text(self.series.signal)}</text></svg>"
        )

    def axes(self) -> list[str]:
        out = [f'<g class="axes" stroke="{GRID_COLOUR}">']
        for v, label in self.value_ticks:
            y = self.y(v)
            out.append(
                f'<line x1="{self.left:.1f}" x2="{self.right:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>'
                f'<text x="{self.left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" stroke="none" '
                f'fill="{MUTED_COLOUR}">{safe_text(label)}</text>'
            )
        ticks, seconds = _time_ticks(self.t0, self.t1, max(int((self.right - self.left) // 110), 2))
        for t in ticks:
            x = self.x(t)
            anchor = "end" if x + 30 > self.width else "middle"
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.top:.1f}" y2="{self.bottom:.1f}"/>'
                f'<text x="{x:.1f}" y="{self.bottom + 14:.1f}" text-anchor="{anchor}" stroke="none" '
                f'fill="{MUTED_COLOUR}">{format_clock(t, seconds)}</text>'
            )
        out.append(
            f'<text x="{self.right:.1f}" y="{self.bottom + 26:.1f}" text-anchor="end" stroke="none" '
            f'fill="{MUTED_COLOUR}">UTC</text>'
            f'<line x1="{self.left:.1f}" x2="{self.right:.1f}" y1="{self.bottom:.1f}" y2="{self.bottom:.1f}" '
            f'stroke="{AXIS_COLOUR}"/></g>'
        )
        return out

    def line(
        self,
        pts: list[Point],
        colour: str,
        stroke: float,
        cls: str,
        entity: str,
        title: str,
        dash: str = "",
        opacity: float = 1.0,
    ) -> str:
        """One entity's polyline, broken at each gap; a lone point between gaps is a dot."""
        segments: list[list[tuple[float, float]]] = [[]]
        for t, v in pts:
            if v is None:
                if segments[-1]:
                    segments.append([])
            else:
                segments[-1].append((self.x(t), self.y(v)))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out = [
            f'<g class="{cls}" data-entity="{safe_text(entity)}" stroke="{colour}" fill="{colour}" '
            f'opacity="{opacity:g}"><title>{safe_text(title)}</title>'
        ]
        for seg in segments:
            if len(seg) == 1:
                out.append(f'<circle cx="{seg[0][0]:.1f}" cy="{seg[0][1]:.1f}" r="{stroke + 1.0:g}" stroke="none"/>')
            elif seg:
                coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
                out.append(
                    f'<polyline points="{coords}" fill="none" stroke-width="{stroke:g}" '
                    f'stroke-linejoin="round" stroke-linecap="round"{dash_attr}/>'
                )
        return "".join(out) + "</g>"

    def threshold(self, value: float, label: str) -> str:
        y = self.y(value)
        text_y = y - 4 if y - 14 > self.top else y + 12
        return (
            f'<g class="threshold-line" data-value="{value:g}"><line x1="{self.left:.1f}" x2="{self.right:.1f}" '
            f'y1="{y:.1f}" y2="{y:.1f}" stroke="{THRESHOLD_COLOUR}" stroke-width="1.25" stroke-dasharray="2 3"/>'
            f'<text x="{self.left + 4:.1f}" y="{text_y:.1f}" fill="{THRESHOLD_COLOUR}"{_HALO}>'
            f"{safe_text(label)}</text></g>"
        )

    def marks(self, marks: Sequence[Mark]) -> str:
        """Vertical lines at the lifecycle events; labelled where there is room (opened and resolved first)."""
        out: list[str] = []
        labelled: list[float] = []
        for m in sorted(marks, key=lambda m: (m.kind == "updated", m.sequence)):
            t = finite(m.ts)
            if t is None or m.kind not in MARK_COLOURS:
                continue
            x, colour = self.x(t), MARK_COLOURS[m.kind]
            dash = ' stroke-dasharray="3 3"' if m.kind == "updated" else ""
            tip = f"{m.kind} #{m.sequence} at {format_clock(t, True)} UTC"
            out.append(
                f'<g class="mark mark-{m.kind}" data-kind="{m.kind}" data-sequence="{m.sequence}">'
                f'<title>{safe_text(tip)}</title><line x1="{x:.1f}" x2="{x:.1f}" y1="{self.top - 4:.1f}" '
                f'y2="{self.bottom:.1f}" stroke="{colour}" stroke-width="1.5"{dash}/>'
            )
            if all(abs(x - other) > 52 for other in labelled):
                labelled.append(x)
                anchor = "start" if x < self.right - 60 else "end"
                shift = 3 if anchor == "start" else -3
                out.append(
                    f'<text x="{x + shift:.1f}" y="{self.top - 8:.1f}" text-anchor="{anchor}" '
                    f'fill="{colour}" font-size="10"{_HALO}>{m.kind}</text>'
                )
            out.append("</g>")
        return "".join(out)

    def legend(self, items: Sequence[tuple[str, str, str]]) -> str:
        out = ['<g class="legend">']
        shown = sum(len(r) for r in self.legend_rows)
        for row_i, row in enumerate(self.legend_rows):
            y = self.bottom + 32 + 15 * row_i
            for colour, kind, label, x in row:
                if kind == "box":
                    out.append(
                        f'<rect x="{x:.1f}" y="{y - 8:.1f}" width="18" height="9" fill="{colour}" fill-opacity="0.35"/>'
                    )
                elif kind == "mark":
                    out.append(
                        f'<line x1="{x + 9:.1f}" x2="{x + 9:.1f}" y1="{y - 10:.1f}" y2="{y + 1:.1f}" '
                        f'stroke="{colour}" stroke-width="2"/>'
                    )
                else:
                    dash = {"dash": ' stroke-dasharray="4 3"', "dots": ' stroke-dasharray="2 3"'}.get(kind, "")
                    out.append(
                        f'<line x1="{x:.1f}" x2="{x + 18:.1f}" y1="{y - 4:.1f}" y2="{y - 4:.1f}" '
                        f'stroke="{colour}" stroke-width="2"{dash}/>'
                    )
                out.append(f'<text x="{x + 24:.1f}" y="{y:.1f}" fill="{TEXT_COLOUR}">{safe_text(label)}</text>')
        if shown < len(items):
            out.append(
                f'<text x="{self.width - 8}" y="{self.full_height - 4}" text-anchor="end" '
                f'fill="{MUTED_COLOUR}">+{len(items) - shown} more</text>'
            )
        return "".join(out) + "</g>"

    def latest_strip(self, entities: Sequence[str], lines: dict[str, list[Point]], colour: dict[str, str]) -> str:
        """One bar per entity: its latest value, from zero (or the lowest value when some are negative)."""
        latest = {e: next((v for _, v in reversed(lines[e]) if v is not None), None) for e in entities}
        known = [v for v in latest.values() if v is not None]
        base, peak = min([0.0, *known]), max([0.0, *known])
        top, floor_y = self.height + 12.0, self.height + STRIP_HEIGHT - 16.0
        col_w = (self.right - self.left) / max(len(entities), 1)
        out = [
            f'<g class="latest-strip"><text x="{self.left - 6:.1f}" y="{floor_y:.1f}" text-anchor="end" '
            f'fill="{MUTED_COLOUR}">latest</text>'
        ]
        for i, e in enumerate(entities):
            v, cx = latest[e], self.left + col_w * (i + 0.5)
            fill = colour.get(e, PEER_COLOUR)
            share = (v - base) / (peak - base) if v is not None and peak > base else 0.0
            h = max(min(share, 1.0), 0.0) * (floor_y - top - 12) if math.isfinite(share) else 0.0
            bar_w = max(min(col_w * 0.5, 28.0), 2.0)
            shown = format_value(v, self.unit) if v is not None else "–"
            out.append(
                f'<g class="latest-bar" data-entity="{safe_text(e)}"><title>'
                f"{safe_text(entity_label(self.series.per, e))}: {safe_text(shown)}</title>"
                f'<rect x="{cx - bar_w / 2:.1f}" y="{floor_y - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{fill}"/><text x="{cx:.1f}" y="{floor_y - h - 3:.1f}" text-anchor="middle" '
                f'font-size="9" fill="{MUTED_COLOUR}">{safe_text(shown if col_w > 40 else "")}</text>'
                f'<text x="{cx:.1f}" y="{floor_y + 12:.1f}" text-anchor="middle" font-size="10" '
                f'fill="{fill if e in colour else MUTED_COLOUR}">'
                f"{safe_text(entity_label(self.series.per, e, max(int(col_w // 6.5), 2)))}</text></g>"
            )
        return "".join(out) + "</g>"
