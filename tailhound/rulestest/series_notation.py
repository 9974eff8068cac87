"""promtool's expanding notation for test series, and series selectors (pure).

``1 2 3``, ``axn``, ``a+bxn``, ``a-bxn``, ``_`` (a gap) and ``_xn`` mean what they mean to ``promtool test rules``
(the table is in docs/rules-testing.md); the k-th value of ``a+bxn`` is ``a + k*b``, so ``0+0.1x30`` stays exact.
``stale``, ``NaN`` and ``Inf`` are refused: a snapshot carries finite numbers only. :func:`parse_series` returns
the values (``None`` for a gap); :func:`format_series` writes them back in the shortest notation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

__all__ = ["SeriesError", "parse_series", "format_series", "parse_selector", "format_selector"]

#: a number as promtool's series lexer reads it (no hex, no NaN/Inf here: see the module docstring)
_NUM = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_ITEM = re.compile(rf"^(?P<a>[+-]?{_NUM})(?:(?P<op>[+-])(?P<b>{_NUM}))?(?:x(?P<n>\d+))?$")
_GAP = re.compile(r"^_(?:x(?P<n>\d+))?$")
#: more samples than any test needs (a day at 1 s); guards against ``1x999999999`` typos
MAX_SAMPLES = 100_000


class SeriesError(ValueError):
    """A series that does not parse; ``column`` is the 1-based position of the bad item in the text."""

    def __init__(self, message: str, column: int | None = None) -> None:
        self.column = column
        self.message = message
        super().__init__(f"{message} (column {column})" if column else message)


def parse_series(text: str | int | float) -> list[float | None]:
    """Expand a series in promtool's notation; ``None`` marks a gap (``_``)."""
    if isinstance(text, bool):
        raise SeriesError(f"a series is text like '0+10x30', not {text!r}")
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise SeriesError(f"{text!r} is not a finite number")
        return [float(text)]
    out: list[float | None] = []
    for m in re.finditer(r"\S+", text):
        item, col = m.group(0), m.start() + 1
        gap = _GAP.match(item)
        if gap:
            n = int(gap.group("n")) if gap.group("n") is not None else 1
            _check_count(len(out) + n, item, col)
            out.extend([None] * n)
            continue
        found = _ITEM.match(item)
        if not found:
            raise SeriesError(_explain(item), col)
        a = float(found.group("a"))
        if not math.isfinite(a):
            raise SeriesError(f"{item!r} overflows", col)
        n_text, op = found.group("n"), found.group("op")
        if op is not None and n_text is None:
            raise SeriesError(
                f"{item!r}: an increment needs a count, e.g. {found.group('a')}{op}{found.group('b')}x10", col
            )
        if n_text is None:
            out.append(a)
            continue
        n = int(n_text)
        _check_count(len(out) + n + 1, item, col)
        b = float(found.group("b")) if op is not None else 0.0
        if op == "-":
            b = -b
        values = [a + k * b for k in range(n + 1)]
        if not all(math.isfinite(v) for v in values):
            raise SeriesError(f"{item!r} overflows", col)
        out.extend(values)
    return out


def _check_count(total: int, item: str, col: int) -> None:
    if total > MAX_SAMPLES:
        raise SeriesError(f"{item!r}: more than {MAX_SAMPLES} samples in one series", col)


def _explain(item: str) -> str:
    low = item.lower()
    if low == "stale":
        return "'stale' (a staleness marker) is not supported: a gap is '_'"
    if low.lstrip("+-") in ("nan", "inf"):
        return f"{item!r}: snapshots carry finite numbers only"
    if re.match(rf"^[+-]?{_NUM}x$", item) or re.match(rf"^[+-]?{_NUM}[+-]{_NUM}x$", item):
        return f"{item!r}: 'x' needs a count of further samples, e.g. {item}10"
    if re.match(rf"^[+-]?{_NUM}[+-]{_NUM}$", item):
        return f"{item!r}: an increment needs a count, e.g. {item}x10"
    if "," in item:
        return f"{item!r}: separate values with spaces, not commas"
    return (
        f"{item!r} is not a value: expected a number, 'axn' (n+1 samples of a), 'a+bxn' / 'a-bxn' "
        "(from a in n steps of b) or '_' (a gap)"
    )


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def format_series(values: Sequence[float | None]) -> str:
    """The values in the notation (runs of equal values and of equal steps folded); parses back to `values`."""
    items: list[str] = []
    i, n = 0, len(values)
    while i < n:
        v = values[i]
        if v is None:
            j = i
            while j < n and values[j] is None:
                j += 1
            items.append("_" if j - i == 1 else f"_x{j - i}")
            i = j
            continue
        j = i + 1
        while j < n and values[j] is not None and values[j] == v:
            j += 1
        if j - i >= 2:
            items.append(f"{_fmt(v)}x{j - i - 1}")
            i = j
            continue
        # an arithmetic run of at least 3 values whose `a + k*b` reproduces every value exactly
        nxt = values[i + 1] if i + 1 < n else None
        if nxt is not None:
            b = nxt - v
            text_b = _fmt(abs(b))
            step = float(text_b) * (1 if b >= 0 else -1)
            j = i + 1
            while j < n and values[j] is not None and values[j] == v + (j - i) * step:
                j += 1
            if j - i >= 3:
                items.append(f"{_fmt(v)}{'+' if b >= 0 else '-'}{text_b}x{j - i - 1}")
                i = j
                continue
        items.append(_fmt(v))
        i += 1
    return " ".join(items)


_NAME = re.compile(r"^\s*(?P<name>[a-zA-Z_:][a-zA-Z0-9_:.]*)\s*(?:\{(?P<labels>.*)\}\s*)?$", re.S)
_LABEL = re.compile(r'\s*(?P<k>[a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"(?P<v>(?:[^"\\]|\\.)*)"\s*(?:,|$)', re.S)


def parse_selector(text: str) -> tuple[str, dict[str, str]]:
    """``gpu.temperature{gpu="3"}`` -> ("gpu.temperature", {"gpu": "3"}). Names may hold dots (canonical
    signals) and colons (``vllm:num_requests_waiting``); label values are double-quoted, with
    ``\\"``, ``\\\\`` and ``\\n`` escapes as in the text exposition."""
    m = _NAME.match(text)
    if not m:
        raise SeriesError(f'{text!r} is not a series: expected name{{label="value", ...}}')
    labels: dict[str, str] = {}
    body = (m.group("labels") or "").strip()
    at = 0
    while at < len(body):
        lm = _LABEL.match(body, at)
        if not lm or lm.end() == at:
            raise SeriesError(
                f'{text!r}: bad label list near {body[at : at + 20]!r} (write name="value", separated by commas)'
            )
        key = lm.group("k")
        if key in labels:
            raise SeriesError(f"{text!r}: label {key!r} given twice")
        labels[key] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), lm.group("v"))
        at = lm.end()
    return m.group("name"), labels


def format_selector(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    inner = ", ".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
