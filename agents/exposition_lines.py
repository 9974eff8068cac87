"""One line of Prometheus text (0.0.4) or OpenMetrics 1.0: sample lines, label sets, exemplars, names.

:func:`tailhound.agents.exposition.parse_exposition` splits the text into lines and groups the samples
into families; this module reads one line and checks it against the :class:`Limits`. A line it cannot
take raises :class:`LineError` with a reason (``bad_labels``, ``too_many_labels`` ...) and, when the
metric name could be read, the name, so that the caller drops that metric's family.

Accepted: ``name{labels} value [timestamp] [# {exemplar labels} value [timestamp]]``, label names and
metric names quoted as Prometheus 3 writes UTF-8 names (``{"my.metric", "http.status"="200"} 1``),
``\\\\``, ``\\"`` and ``\\n`` escapes, trailing commas, blanks around ``=``, NaN and +Inf. Refused as
Prometheus refuses them: ``1_000`` and hex values, duplicate label names, two metric names, an empty
label name, a timestamp that is not a finite number, a malformed exemplar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import isfinite

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STR = r'"([^"\\]*(?:\\.[^"\\]*)*)"'  # a quoted string, its escapes still in
QUOTED = re.compile(_STR)
#: `name="value"` or a quoted name, then `,` or `}`. Each blank has one way to match: two `[ \t]*` in a row
#: (around the optional value) made a 64 KiB line of blanks take seconds of backtracking.
_PAIR = re.compile(r"[ \t]*(?:([a-zA-Z_][a-zA-Z0-9_]*)|" + _STR + r")[ \t]*(?:=[ \t]*" + _STR + r"[ \t]*)?([,}])")
_CLOSE = re.compile(r"[ \t]*\}")
_ESCAPE = re.compile(r"\\[\\\"n]")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Items = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Limits:
    """What one scrape may bring in. A line over a limit is dropped, with its family, and counted."""

    max_line_length: int = 65536  # characters in one line
    max_labels: int = 64  # labels on one sample
    max_label_name: int = 1024  # characters
    max_label_value: int = 4096  # characters, unescaped
    max_families: int = 10_000
    max_samples: int = 100_000


DEFAULT_LIMITS = Limits()


class LineError(Exception):
    """A line the parser leaves out: why (a short reason, counted), what, and the metric if known."""

    def __init__(self, reason: str, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.reason, self.message, self.name = reason, message, name


def number(text: str) -> float | None:
    """A Go ``ParseFloat`` number (NaN, +Inf ...); None for what Prometheus refuses (``1_0``, hex)."""
    if "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def timestamp_ok(text: str) -> bool:
    ts = number(text)
    return ts is not None and isfinite(ts)


def unescape(text: str) -> str:
    return _ESCAPE.sub(lambda e: _ESCAPES[e.group(0)], text) if "\\" in text else text


def scan_labels(line: str, pos: int, lim: Limits) -> tuple[str | None, list[tuple[str, str]], int]:
    """The label set whose ``{`` is at ``line[pos]`` -> (quoted metric name in it or None, items, end)."""
    items: list[tuple[str, str]] = []
    qname = None
    start, pos = pos, pos + 1
    while True:
        m = _CLOSE.match(line, pos)
        if m is not None:
            return qname, items, m.end()
        m = _PAIR.match(line, pos)
        if m is None:
            raise LineError("bad_labels", f"malformed labels {line[start : pos + 40]!r}", qname)
        bare, quoted, value, sep = m.groups()
        if value is None:  # a quoted name alone: the metric name (Prometheus 3)
            if not quoted or qname is not None:
                raise LineError("bad_labels", f"malformed labels {line[start : m.end() + 20]!r}", qname)
            qname = unescape(quoted)
        else:
            name = bare if bare is not None else unescape(quoted)
            if not name:
                raise LineError("bad_labels", "empty label name", qname)
            if len(items) >= lim.max_labels:
                raise LineError("too_many_labels", f"more than {lim.max_labels} labels", qname)
            if len(name) > lim.max_label_name:
                raise LineError("label_name_too_long", f"label name {name[:40]!r}... too long", qname)
            value = unescape(value)
            if len(value) > lim.max_label_value:
                raise LineError("label_value_too_long", f"label {name[:40]!r}: value too long", qname)
            items.append((name, value))
        pos = m.end()
        if sep == "}":
            return qname, items, pos


#: label set text -> (quoted metric name, items) of label sets read before, under ``_LABELSETS_LIMITS``:
#: one scrape repeats a label set over many metrics (dcgm-exporter: every field of a GPU).
_LABELSETS: dict[str, tuple[str | None, Items]] = {}
_LABELSETS_LIMITS: list[Limits] = [DEFAULT_LIMITS]
MAX_CACHED = 50_000


def use_limits(lim: Limits) -> None:
    """Forget the cached label sets when they were checked against other limits."""
    if _LABELSETS_LIMITS[0] != lim:
        _LABELSETS.clear()
        _LABELSETS_LIMITS[0] = lim


def forget_labelsets() -> None:
    _LABELSETS.clear()


def _label_set(line: str, brace: int, name: str | None, lim: Limits) -> tuple[str | None, Items, int]:
    close = line.rfind("}")
    hit = _LABELSETS.get(line[brace : close + 1])
    if hit is not None:  # a valid label set ending at the last `}`: scanning would end there too
        return hit[0], hit[1], close + 1
    try:
        qname, found, end = scan_labels(line, brace, lim)
    except LineError as exc:
        exc.name = name or exc.name
        raise
    items = tuple(found)
    if len(dict(items)) != len(items):
        raise LineError("duplicate_label", f"{name or qname}: a label appears twice", name or qname)
    if len(_LABELSETS) >= MAX_CACHED:
        _LABELSETS.clear()
    _LABELSETS[line[brace:end]] = (qname, items)
    return qname, items, end


def check_exemplar(text: str, lim: Limits, name: str) -> None:
    """OpenMetrics ``# {labels} value [timestamp]`` after a sample: checked, then left out."""
    body = text.lstrip(" \t")
    try:
        if not body.startswith("{"):
            raise LineError("bad_exemplar", "")
        qname, _, end = scan_labels(body, 0, lim)
        tokens = body[end:].split()
        ok = qname is None and 1 <= len(tokens) <= 2 and body[end : end + 1] in (" ", "\t")
        if not ok or number(tokens[0]) is None or (len(tokens) == 2 and not timestamp_ok(tokens[1])):
            raise LineError("bad_exemplar", "")
    except LineError:
        raise LineError("bad_exemplar", f"{name}: malformed exemplar {text[:60]!r}", name) from None


def parse_sample(line: str, lim: Limits) -> tuple[str, Items, int, float]:
    """A sample line -> (metric name, label items, end of ``name{labels}`` or 0, value)."""
    m = NAME_RE.match(line)
    name, pos = (m.group(), m.end()) if m is not None else (None, 0)
    if name is not None and pos < len(line) and line[pos] not in " \t{":
        raise LineError("bad_line", f"not a sample line: {line[:80]!r}")
    rest = line[pos:].lstrip(" \t")
    items: Items = ()
    key_end = 0
    if rest[:1] == "{":
        qname, items, key_end = _label_set(line, len(line) - len(rest), name, lim)
        if qname is not None:
            if name is not None:
                raise LineError("bad_labels", f"{name}: a second metric name {qname!r}", name)
            name = qname
        if name is None:
            raise LineError("bad_line", f"metric name not set: {line[:80]!r}")
        rest = line[key_end:]
    elif name is None:
        raise LineError("bad_line", f"not a sample line: {line[:80]!r}")
    values, hash_, exemplar = rest.partition("#")
    tokens = values.split()
    if not tokens or len(tokens) > 2:
        raise LineError("bad_line", f"{name}: expected a value and at most a timestamp: {values[:60]!r}", name)
    value = number(tokens[0])
    if value is None:
        raise LineError("bad_value", f"{name}: value {tokens[0][:40]!r} is not a number", name)
    if len(tokens) == 2 and not timestamp_ok(tokens[1]):
        raise LineError("bad_timestamp", f"{name}: timestamp {tokens[1][:40]!r} is not a number", name)
    if hash_:
        check_exemplar(exemplar, lim, name)
    return name, items, key_end, value


def name_hint(line: str) -> str | None:
    """The metric name at the start of a line too long or too many to parse (from its first 1 KiB)."""
    head = line[:1024]
    m = NAME_RE.match(head)
    if m is not None:
        return m.group() if m.end() < len(head) else None
    if head[:1] == "{":
        body = head[1:].lstrip(" \t")
        m = QUOTED.match(body)
        if m is not None and body[m.end() :].lstrip(" \t")[:1] in (",", "}"):
            return unescape(m.group(1)) or None
    return None
