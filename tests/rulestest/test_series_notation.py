"""promtool's expanding notation (tailhound.rulestest.series_notation): examples from promtool's docs, errors with
their column, and properties over generated series (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailhound.rulestest.series_notation import (
    MAX_SAMPLES,
    SeriesError,
    format_selector,
    format_series,
    parse_selector,
    parse_series,
)


@pytest.mark.parametrize(
    ("text", "values"),
    [
        # promtool's documented examples
        ("-2+4x3", [-2, 2, 6, 10]),
        (" 1-2x4", [1, -1, -3, -5, -7]),
        (" 1x4", [1, 1, 1, 1, 1]),
        ("1 _x3 2", [1, None, None, None, 2]),
        # the brief's
        ("0+10x30", [10.0 * k for k in range(31)]),
        ("1x5", [1] * 6),
        ("_", [None]),
        ("1 2 3", [1, 2, 3]),
        ("0-5x3", [0, -5, -10, -15]),
        # numbers as the series lexer reads them
        ("1e3 .5 +3 -0.25 2.", [1000, 0.5, 3, -0.25, 2]),
        ("1e+2+1x2", [100, 101, 102]),
        ("7x0", [7]),
        ("_x0", []),
        ("  ", []),
    ],
)
def test_expands_like_promtool(text, values):
    assert parse_series(text) == values


def test_numbers_from_yaml_are_one_sample():
    assert parse_series(5) == [5.0]
    assert parse_series(0.25) == [0.25]
    with pytest.raises(SeriesError):
        parse_series(True)


def test_steps_are_exact_multiples():
    """a + k*b, not b added k times: 0.1 steps do not drift."""
    assert parse_series("0+0.1x30")[30] == 0.1 * 30
    assert parse_series("0+0.1x30")[10] == 1.0


@pytest.mark.parametrize(
    ("text", "column", "says"),
    [
        ("1 2 stale", 5, "staleness marker"),
        ("1 NaN", 3, "finite numbers"),
        ("0 +Inf", 3, "finite numbers"),
        ("5x", 1, "'x' needs a count"),
        ("1 0+10", 3, "needs a count"),
        ("1,2,3", 1, "spaces, not commas"),
        ("1 abc", 3, "is not a value"),
        ("1 2x3.5", 3, "is not a value"),
        ("x3", 1, "is not a value"),
    ],
)
def test_errors_name_the_item_and_its_column(text, column, says):
    with pytest.raises(SeriesError) as err:
        parse_series(text)
    assert err.value.column == column
    assert says in str(err.value)


def test_absurd_lengths_are_refused():
    with pytest.raises(SeriesError, match="more than"):
        parse_series(f"1x{MAX_SAMPLES}")
    with pytest.raises(SeriesError, match="more than"):
        parse_series(f"_x{MAX_SAMPLES + 1}")
    assert len(parse_series(f"1x{MAX_SAMPLES - 1}")) == MAX_SAMPLES


def test_overflow_is_an_error():
    with pytest.raises(SeriesError, match="overflows"):
        parse_series("1e308+1e308x5")
    with pytest.raises(SeriesError, match="overflows"):
        parse_series("1 1e999")


def test_selectors():
    assert parse_selector('gpu.temperature{gpu="3"}') == ("gpu.temperature", {"gpu": "3"})
    assert parse_selector("engine.requests_waiting") == ("engine.requests_waiting", {})
    assert parse_selector('vllm:num_requests_waiting{model_name="a b", engine="0",}') == (
        "vllm:num_requests_waiting",
        {"model_name": "a b", "engine": "0"},
    )
    assert parse_selector(r'x{v="a\"b\\c\nd"}') == ("x", {"v": 'a"b\\c\nd'})
    for bad in ("gpu{gpu=3}", 'gpu{gpu="3"', '{gpu="3"}', 'a{x="1", x="2"}', "9lives"):
        with pytest.raises(SeriesError):
            parse_selector(bad)


# --- properties ---------------------------------------------------------------------------------------

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
#: numbers written the way people write them in tests (they parse back to exactly themselves)
written = st.one_of(
    st.integers(-10_000, 10_000).map(float),
    st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False).map(float),
)
items = st.one_of(
    st.tuples(st.just("gap"), st.integers(0, 20)),
    st.tuples(st.just("value"), written),
    st.tuples(st.just("repeat"), written, st.integers(0, 20)),
    st.tuples(st.just("step"), written, written, st.integers(0, 20)),
)


def _num(v: float) -> str:
    return str(int(v)) if v == int(v) else repr(v)


def _render(item: tuple) -> tuple[str, list[float | None]]:
    """One item as text, and what promtool's grammar says it expands to."""
    kind = item[0]
    if kind == "gap":
        n = item[1]
        return (f"_x{n}", [None] * n) if n != 1 else ("_", [None])
    if kind == "value":
        return _num(item[1]), [item[1]]
    if kind == "repeat":
        _, a, n = item
        return f"{_num(a)}x{n}", [a] * (n + 1)
    _, a, b, n = item
    sign = "-" if b < 0 else "+"
    return f"{_num(a)}{sign}{_num(abs(b))}x{n}", [a + k * b for k in range(n + 1)]


@settings(max_examples=300, deadline=None)
@given(st.lists(items, max_size=12))
def test_expansion_matches_the_grammar(parts):
    rendered = [_render(p) for p in parts]
    text = " ".join(t for t, _ in rendered)
    expected = [v for _, vs in rendered for v in vs]
    assert parse_series(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(items, max_size=12))
def test_lengths_follow_n_plus_one_and_gaps_n(parts):
    text = " ".join(_render(p)[0] for p in parts)
    want = sum(
        {"gap": lambda p: p[1], "value": lambda p: 1, "repeat": lambda p: p[2] + 1, "step": lambda p: p[3] + 1}[p[0]](p)
        for p in parts
    )
    assert len(parse_series(text)) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), finite), max_size=40))
def test_format_parses_back_to_the_same_values(values):
    text = format_series(values)
    assert parse_series(text) == values
    assert len(text.split()) <= len(values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), written), max_size=40))
def test_format_is_stable(values):
    """format(parse(format(v))) == format(v): the shortest form is a fixed point."""
    once = format_series(values)
    assert format_series(parse_series(once)) == once


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.none(), finite), min_size=1, max_size=30), st.lists(st.one_of(st.none(), finite), max_size=30)
)
def test_concatenation_of_series_is_concatenation_of_values(a, b):
    assert parse_series(format_series(a) + " " + format_series(b)) == a + b


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789+-x_. eE", max_size=30))
def test_anything_either_parses_to_finite_values_or_says_where(text):
    try:
        values = parse_series(text)
    except SeriesError as exc:
        assert exc.column is None or 1 <= exc.column <= len(text)
        return
    assert all(v is None or math.isfinite(v) for v in values)


label_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:.]{0,20}", fullmatch=True),
    st.dictionaries(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True), label_values, max_size=4),
)
def test_selectors_round_trip(name, labels):
    assert parse_selector(format_selector(name, labels)) == (name, labels)
