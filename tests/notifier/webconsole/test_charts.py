"""The SVG charts: well-formed, accessible, the lines, threshold, ``for`` window and marks where they belong,
and robust to what a series may carry (gaps, one point, constants, no data, huge values, hostile names)."""

from __future__ import annotations

import math
import re

import pytest

from tailhound.incident import MAX_SERIES_ENTITIES
from tailhound.notifier.webconsole.chart_frame import MARK_COLOURS
from tailhound.notifier.webconsole.charts import peer_svg, timeline_svg
from tailhound.notifier.webconsole.formatting import format_span, format_value
from tailhound.notifier.webconsole.view import Mark
from tests.notifier.webconsole.factories import (
    FOR_S,
    PENDING,
    T0,
    clock_series,
    thermal_series,
    thermal_view,
    unchecked_series,
)
from tests.notifier.webconsole.markup import SVG_NS, coordinates, find_all, parse_svg, texts

HOSTILE = '<script>alert("x")</script>&'


def _inside(root, width: int, height: int) -> None:
    box = root.attrib["viewBox"].split()
    assert box[:2] == ["0", "0"] and float(box[2]) == width
    assert all(-0.01 <= v <= max(width, float(box[3])) for v in coordinates(root))


def test_timeline_draws_values_baselines_threshold_window_and_marks():
    view = thermal_view()
    svg = timeline_svg(thermal_series(), view.marks)
    root = parse_svg(svg)
    assert root.attrib["role"] == "img" and root.attrib["data-testid"] == "timeline-chart"
    assert root.attrib["data-signal"] == "gpu.temperature"
    assert "gpu.temperature" in root.attrib["aria-label"] and "GPU 3" in root.attrib["aria-label"]
    assert root.find(f"{SVG_NS}title") is not None and "GPU 3, GPU 5" in root.find(f"{SVG_NS}title").text
    lines = {g.attrib["data-entity"]: g for g in find_all(root, "g", "series-line")}
    assert set(lines) == {"3", "5"}  # only the focus entities; peers are for the peer view
    assert all(len(find_all(g, "polyline")) >= 1 for g in lines.values())
    baselines = find_all(root, "g", "baseline-line")
    assert {g.attrib["data-entity"] for g in baselines} == {"3", "5"}
    assert all(p.attrib["stroke-dasharray"] for g in baselines for p in find_all(g, "polyline"))
    (threshold,) = find_all(root, "g", "threshold-line")
    assert "threshold >= 85 C" in texts(threshold)
    (window,) = find_all(root, "rect", "for-window")
    marks = {g.attrib["data-kind"]: g for g in find_all(root, "g", "mark")}
    assert set(marks) == {"opened", "updated", "resolved"}
    for kind, g in marks.items():
        assert find_all(g, "line")[0].attrib["stroke"] == MARK_COLOURS[kind]
    opened_x = float(find_all(marks["opened"], "line")[0].attrib["x1"])
    resolved_x = float(find_all(marks["resolved"], "line")[0].attrib["x1"])
    x0, w = float(window.attrib["x"]), float(window.attrib["width"])
    assert x0 < x0 + w < opened_x < resolved_x  # pending, the `for` window, then the incident opened
    # the window spans for_s on the same time scale as the marks
    px_per_s = (resolved_x - opened_x) / (view.marks[-1].ts - view.marks[0].ts)
    assert w == pytest.approx(FOR_S * px_per_s, abs=1.0)
    labels = texts(root)
    assert "00:05" in labels and "UTC" in labels  # HH:MM ticks
    assert any(t.endswith(" C") for t in labels)  # values carry their unit
    assert {"opened", "resolved"} <= set(labels)
    _inside(root, 720, 220)


def test_threshold_line_sits_at_its_value_between_the_value_ticks():
    root = parse_svg(timeline_svg(thermal_series(), []))
    (threshold,) = find_all(root, "g", "threshold-line")
    y = float(find_all(threshold, "line")[0].attrib["y1"])
    ticks = {t.text: float(t.attrib["y"]) - 4 for t in root.iter(f"{SVG_NS}text") if t.text in ("80 C", "90 C")}
    assert ticks["90 C"] < y < ticks["80 C"]  # SVG y grows downwards
    assert y == pytest.approx(ticks["80 C"] + (ticks["90 C"] - ticks["80 C"]) / 2, abs=1.0)


def test_a_gap_breaks_the_line_and_a_lone_point_is_a_dot():
    values = [60.0 + i for i in range(60)]
    values[10] = values[11] = None  # GPU 5's scrape gap
    values[30] = None
    values[32] = None  # 31 alone between two gaps
    root = parse_svg(timeline_svg(thermal_series(values={"3": values}, baseline={}, focus=["3"]), []))
    (line,) = find_all(root, "g", "series-line")
    assert len(find_all(line, "polyline")) == 3
    assert len(find_all(line, "circle")) == 1
    points = [find_all(line, "polyline")[0].attrib["points"].split()]
    assert len(points[0]) == 10


def test_gpu_5_of_the_thermal_series_has_its_gap():
    root = parse_svg(timeline_svg(thermal_series(), []))
    lines = {g.attrib["data-entity"]: g for g in find_all(root, "g", "series-line")}
    assert len(find_all(lines["3"], "polyline")) == 1 and len(find_all(lines["5"], "polyline")) == 2


def test_empty_series_is_a_no_data_placeholder():
    for svg in (
        timeline_svg(thermal_series(ts=[], values={}, baseline={}), thermal_view().marks),
        timeline_svg(thermal_series(values={"3": [None] * 60, "5": [None] * 60}, baseline={}), []),
        peer_svg(thermal_series(ts=[], values={}, baseline={})),
    ):
        root = parse_svg(svg)
        assert root.attrib["role"] == "img" and "no data" in root.attrib["aria-label"]
        assert any("no data for gpu.temperature" in t for t in texts(root))
        assert not find_all(root, "polyline")


def test_a_single_point_and_constant_values_draw_without_nan():
    one = thermal_series(ts=[T0], values={"3": [88.0]}, baseline={}, focus=["3"], pending_since=None)
    for svg in (timeline_svg(one, [Mark(T0, "opened", 1)]), peer_svg(one)):
        root = parse_svg(svg)
        assert len(find_all(root, "circle")) == 1
        assert any(t.endswith(" C") for t in texts(root))
    flat = thermal_series(values={"3": [70.0] * 60, "5": [70.0] * 60}, baseline={}, threshold=70.0)
    root = parse_svg(timeline_svg(flat, []))
    ys = {p.attrib["points"].split()[0].split(",")[1] for p in find_all(root, "polyline")}
    assert len(ys) == 1  # one flat line, drawn mid-chart
    _inside(root, 720, 220)


@pytest.mark.parametrize(
    "values",
    [
        [1e308, -1e308, 5.0] * 20,
        [1e-12, 3e-12, 2e-12] * 20,
        [float("nan"), float("inf"), float("-inf")] * 19 + [4.0, 5.0, 6.0],
        [0.0] * 60,
    ],
)
def test_huge_tiny_and_non_finite_values_stay_in_the_drawing(values):
    series = unchecked_series(values={"3": values, "5": list(reversed(values))}, baseline={}, threshold=1e309)
    for svg in (
        timeline_svg(series, [Mark(float("inf"), "updated", 2), Mark(T0 + 100, "opened", 1)]),
        peer_svg(series),
    ):
        root = parse_svg(svg)
        _inside(root, 720, int(float(root.attrib["viewBox"].split()[3])))
        assert not re.search(r'="-?(?:nan|inf)', svg.lower())


def test_unsorted_times_and_ragged_value_lists():
    ts = [T0 + 30, T0, T0 + 15, float("nan")]
    series = unchecked_series(ts=ts, values={"3": [3.0, 1.0], "5": [1.0, 2.0, 3.0, 4.0, 5.0]}, baseline={})
    root = parse_svg(timeline_svg(series, []))
    lines = {g.attrib["data-entity"]: g for g in find_all(root, "g", "series-line")}
    xs = [float(p.split(",")[0]) for p in find_all(lines["5"], "polyline")[0].attrib["points"].split()]
    assert xs == sorted(xs) and len(xs) == 3  # in time order; the NaN time is dropped
    # GPU 3 has values at the 1st and 2nd times given (T0+30, T0): sorted, a missing slot between them
    assert not find_all(lines["3"], "polyline") and len(find_all(lines["3"], "circle")) == 2


def test_hostile_names_are_escaped():
    series = thermal_series(
        signal=HOSTILE,
        unit=HOSTILE,
        focus=[HOSTILE],
        values={HOSTILE: [90.0] * 60, "0": [60.0] * 60, "1\x00\x1b": [61.0] * 60},
        baseline={HOSTILE: [63.0] * 60},
        per="engine",
    )
    for svg in (timeline_svg(series, thermal_view().marks), peer_svg(series)):
        assert "<script" not in svg and "\x00" not in svg and "\x1b" not in svg
        root = parse_svg(svg)
        assert root.attrib["data-signal"] == HOSTILE  # the attribute round-trips, escaped in the markup
        assert any("<script>" in t for t in texts(root))


def test_peer_view_highlights_the_focus_against_grey_labelled_peers():
    svg = peer_svg(thermal_series())
    root = parse_svg(svg)
    assert root.attrib["data-testid"] == "peer-chart" and root.attrib["role"] == "img"
    assert root.attrib["data-signal"] == "gpu.temperature" and "6 peers" in root.attrib["aria-label"]
    focus = {g.attrib["data-entity"]: g for g in find_all(root, "g", "focus-line")}
    peers = {g.attrib["data-entity"]: g for g in find_all(root, "g", "peer-line")}
    assert set(focus) == {"3", "5"} and set(peers) == {"0", "1", "2", "4", "6", "7"}
    width = {float(p.attrib["stroke-width"]) for g in focus.values() for p in find_all(g, "polyline")}
    thin = {float(p.attrib["stroke-width"]) for g in peers.values() for p in find_all(g, "polyline")}
    assert min(width) > max(thin)
    assert {g.attrib["stroke"] for g in peers.values()} == {"#8c959f"}
    assert len({g.attrib["stroke"] for g in focus.values()}) == 2
    labels = texts(root)
    assert {f"GPU {g}" for g in range(8)} <= set(labels)
    bars = find_all(root, "g", "latest-bar")
    assert [b.attrib["data-entity"] for b in bars] == ["3", "5", "0", "1", "2", "4", "6", "7"]
    heights = {b.attrib["data-entity"]: float(find_all(b, "rect")[0].attrib["height"]) for b in bars}
    assert heights["3"] > heights["0"] > 0
    _inside(root, 720, 220 + 64)


def test_peer_view_cuts_entities_at_the_bound():
    many = {f"gpu{i}": [float(i)] * 60 for i in range(40)}
    root = parse_svg(peer_svg(unchecked_series(values=many, focus=["gpu0"], baseline={}, per="")))
    assert len(find_all(root, "g", "focus-line")) + len(find_all(root, "g", "peer-line")) == MAX_SERIES_ENTITIES
    assert len(find_all(root, "g", "latest-bar")) == MAX_SERIES_ENTITIES


def test_sm_clock_against_the_peer_median_without_threshold():
    root = parse_svg(timeline_svg(clock_series(), thermal_view().marks, width=960, height=260))
    assert not find_all(root, "g", "threshold-line")
    assert any(t.endswith(" MHz") for t in texts(root))
    assert root.attrib["width"] == "960"
    _inside(root, 960, 260)


def test_for_window_starts_at_pending_since():
    root = parse_svg(timeline_svg(thermal_series(), []))
    (window,) = find_all(root, "rect", "for-window")
    title = window.find(f"{SVG_NS}title").text
    assert format_span(FOR_S) in title
    assert PENDING > T0  # drawn to the right of the first point
    assert float(window.attrib["x"]) > float(root.find(f".//{SVG_NS}polyline").attrib["points"].split(",")[0])
    assert not find_all(parse_svg(timeline_svg(thermal_series(pending_since=None), [])), "rect", "for-window")


def test_value_format():
    assert format_value(1965.0, "MHz") == "1965 MHz"
    assert format_value(0.953) == "0.953"
    assert format_value(12_500.0, "B/s") == "12.5k B/s"
    assert format_value(3.2e9) == "3.2G"
    assert format_value(1.5e-7, "s") == "1.50e-07 s"
    assert format_value(95.0, "%") == "95%"
    assert format_value(math.nan) == "?"
