"""Prometheus text exposition (0.0.4) and OpenMetrics 1.0 text -> snapshot samples.

The agents scrape vLLM, TGI, NIM, dcgm-exporter, node_exporter and blackbox_exporter; this is the
parsing half of that: families with their TYPE, samples with unescaped labels, histograms regrouped
from ``_bucket``/``_sum``/``_count`` series into one :class:`HistogramSample` per label set.
``_created`` series (prometheus_client adds them to counters, histograms and summaries) are dropped;
counters keep the name they are scraped under (``vllm:prompt_tokens_total``).

What the two formats allow is accepted: timestamps, exemplars (``x_bucket{le="1"} 3 # {trace_id="a"} 0.2
1.6e9``, checked and ignored), ``# UNIT``, ``# EOF`` (nothing after it is read), escaped label values,
NaN/+Inf, and Prometheus 3's quoted UTF-8 names (``{"my.metric", "http.status"="200"} 1``, a quoted
name in ``# TYPE``/``# HELP``). Lines end at ``\\n`` only (``\\r\\n`` too): label values may hold the
characters ``str.splitlines`` also breaks at (``\\x1c``, ``\\x85``, ``\\u2028`` ... as node_exporter's
DMI strings do).

The text comes from outside, so nothing in it can fail the whole scrape: a line that breaks the format
or the :class:`Limits` drops its metric family (all of it: half a histogram, or a counter missing some
series, would read as resets and vanished series). :class:`ParseResult` says what was left out, by
reason, with the first few errors and their line numbers. One line's grammar and the :class:`Limits`:
:mod:`tailhound.agents.exposition_lines`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from math import isfinite
from typing import NamedTuple

from pydantic import ValidationError

from tailhound.agents import wire
from tailhound.agents.exposition_lines import (
    DEFAULT_LIMITS,
    MAX_CACHED,
    NAME_RE,
    QUOTED,
    Limits,
    LineError,
    forget_labelsets,
    name_hint,
    parse_sample,
    timestamp_ok,
    unescape,
    use_limits,
)
from tailhound.errors import TailhoundError
from tailhound.snapshot import CounterSample, GaugeSample, HistogramSample

__all__ = [
    "DEFAULT_LIMITS",
    "ExpositionError",
    "Family",
    "Limits",
    "ParseResult",
    "RawSample",
    "parse_exposition",
    "to_samples",
]

_TYPES = frozenset(
    {"counter", "gauge", "histogram", "gaugehistogram", "summary", "untyped", "unknown", "info", "stateset"}
)
_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_gcount", "_gsum")
MAX_NAME = 200  # the wire model's limit
MAX_PROBLEMS = 16  # errors kept (with their line numbers) per parse


class ExpositionError(TailhoundError):
    def __init__(self, line_no: int, message: str) -> None:
        self.line_no = line_no
        super().__init__(f"line {line_no}: {message}")


class RawSample(NamedTuple):
    """One sample line. A tuple, so that :func:`to_samples` unpacks it like the ``(name, labels, value)``
    entries a native collector's writer hands over directly
    (:meth:`tailhound.agents.render.ExpositionWriter.families`)."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[RawSample] = field(default_factory=list)


class ParseResult(list[Family]):
    """The families, in order of appearance (a ``list[Family]``), and what was left out:
    ``rejected`` counts the offending lines by reason (``bad_labels``, ``too_many_samples`` ...),
    ``dropped`` maps each family left out to the reason, ``problems`` holds the first errors."""

    def __init__(self) -> None:
        super().__init__()
        self.rejected: dict[str, int] = {}
        self.dropped: dict[str, str] = {}
        self.problems: list[ExpositionError] = []

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def _reject(self, line_no: int, reason: str, message: str, family: str | None = None) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(ExpositionError(line_no, message))
        if family is not None:
            self.dropped.setdefault(family, reason)


def parse_value(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(text)


def _family_of(name: str, families: dict[str, Family], lim: Limits, create: bool = True) -> Family | None:
    if name in families:
        return families[name]
    for suffix in _SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in families:
            return families[base]
    if not create:
        return None
    if len(families) >= lim.max_families:
        raise LineError("too_many_families", f"{name}: more than {lim.max_families} metric families")
    fam = families[name] = Family(name=name)
    return fam


def _metadata(line: str, families: dict[str, Family], lim: Limits) -> bool:
    """A ``#`` line: HELP/TYPE (UNIT and other comments are skipped). True at ``# EOF``."""
    body = line[1:].lstrip(" \t")
    if body == "EOF":
        return True
    keyword = body[:4]
    if keyword not in ("HELP", "TYPE", "UNIT") or body[4:5] not in (" ", "\t"):
        return False  # a comment
    rest = body[5:].lstrip(" \t")
    m = (QUOTED if rest[:1] == '"' else NAME_RE).match(rest)
    tail = rest[m.end() :] if m is not None else ""
    if m is None or (tail and tail[0] not in " \t"):
        raise LineError("bad_metadata", f"{keyword}: no metric name: {line[:80]!r}")
    name = unescape(m.group(1)) if m.re is QUOTED else m.group()
    if keyword == "UNIT" or not name:
        return False
    fam = families.get(name)
    if fam is None:
        if len(families) >= lim.max_families:
            raise LineError("too_many_families", f"{name}: more than {lim.max_families} metric families")
        fam = families[name] = Family(name=name)
    tail = tail.strip(" \t")
    if keyword == "HELP":
        fam.help = unescape(tail)
    elif (tail or "untyped") in _TYPES:
        fam.type = tail or "untyped"
    else:
        raise LineError("bad_type", f"{name}: unknown TYPE {tail[:40]!r}", name)
    return False


_raw_sample = tuple.__new__  # RawSample(name, labels, value) without the generated __new__'s call overhead

#: ``name{labels}`` text -> (name, label items) of series parsed before, under ``_SERIES_LIMITS``: scrapes
#: repeat the same series every time, so a known one skips the label parser and its checks.
_SERIES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
_SERIES_LIMITS: list[Limits] = [DEFAULT_LIMITS]


def _parse_label_text(text: str, lim: Limits = DEFAULT_LIMITS) -> tuple[tuple[str, str], ...]:
    """``{a="b",...}`` -> label items."""
    return parse_sample(f"x{text} 0", lim)[1]


def _forget_parsed() -> None:
    """Forget the series and label sets seen so far (what a first scrape of a target pays for)."""
    _SERIES.clear()
    forget_labelsets()


_parse_label_text.cache_clear = _forget_parsed  # type: ignore[attr-defined]  # bench/parse_speed.py's first scrape


def parse_exposition(text: str, limits: Limits | None = None) -> ParseResult:
    """Parse Prometheus text or OpenMetrics text into families; never raises (see the module docstring)."""
    lim = DEFAULT_LIMITS if limits is None else limits
    if _SERIES_LIMITS[0] != lim:  # the cached series were checked against other limits
        _SERIES.clear()
        _SERIES_LIMITS[0] = lim
    use_limits(lim)
    series = _SERIES
    result = ParseResult()
    families: dict[str, Family] = {}
    family_of: dict[str, Family] = {}  # sample name -> family, memoised (suffix lookups are not free)
    max_line, max_samples = lim.max_line_length, lim.max_samples
    lines = text.split("\n")
    n_lines, count_lines = 0, len(lines) > max_samples
    for line_no, line in enumerate(lines, 1):
        try:
            if len(line) > max_line:
                raise LineError("line_too_long", f"{len(line)} characters", name_hint(line))
            line = line.strip(" \t\r")
            if not line:
                continue
            if line[0] == "#":
                if _metadata(line, families, lim):
                    if any(rest.strip() for rest in lines[line_no:]):
                        result._reject(line_no, "after_eof", "lines after # EOF are ignored")
                    break
                continue
            if count_lines:  # sample lines, bad ones too: only a text of that many lines can reach the limit
                if n_lines >= max_samples:  # the family being read is cut short: drop it, read no more
                    fam = _family_of(hint, families, lim, create=False) if (hint := name_hint(line)) else None
                    more = sum(1 for rest in lines[line_no:] if rest.strip(" \t\r")[:1] not in ("", "#"))
                    result._reject(
                        line_no,
                        "too_many_samples",
                        f"more than {max_samples} samples",
                        fam.name if fam is not None and fam.samples else None,
                    )
                    result.rejected["too_many_samples"] += more
                    break
                n_lines += 1
            close = line.rfind("}")
            known = series.get(line[: close + 1]) if close > 0 else None
            if known is not None:  # a series seen before: only the value (and timestamp) is new
                rest = line[close + 1 :].split()
                try:
                    if len(rest) != 1 and not (len(rest) == 2 and timestamp_ok(rest[1])) or "_" in rest[0]:
                        raise ValueError
                    value = float(rest[0])
                    name, labels = known[0], dict(known[1])
                except (ValueError, IndexError):
                    known = None  # let the full parse say what is wrong
            if known is None:
                name, items, key_end, value = parse_sample(line, lim)
                labels = dict(items)
                if key_end:
                    if len(series) >= MAX_CACHED:
                        series.clear()
                    series[line[:key_end]] = (name, items)
            fam = family_of.get(name)
            if fam is None:
                fam = family_of[name] = _family_of(name, families, lim)
        except LineError as exc:
            fam = None
            if exc.name is not None:
                try:
                    fam = family_of.get(exc.name) or _family_of(exc.name, families, lim)
                except LineError:
                    fam = None
            result._reject(line_no, exc.reason, exc.message, fam.name if fam is not None else exc.name)
            continue
        fam.samples.append(_raw_sample(RawSample, (name, labels, value)))
    dropped = result.dropped
    result.extend(f for f in families.values() if f.samples and f.name not in dropped)
    return result


Sample = GaugeSample | CounterSample | HistogramSample


def to_samples(
    families: list[Family],
    drop: Callable[[float], bool] | None = None,
    counters: Collection[str] = (),
    errors: list[str] | None = None,
    *,
    counter: Callable[[str, dict[str, str], float], Sample] = wire.counter,
    histogram: Callable[[HistogramSample], HistogramSample] | None = None,
) -> list[Sample]:
    """Families -> wire samples.

    NaN, infinities and values `drop` says are sentinels (dcgm-exporter's NOT_SUPPORTED) are left
    out: absent, not 0. Untyped families named in `counters` become counters (node_exporter exposes
    its netstat counters untyped). A family that cannot become a valid sample (a histogram whose
    buckets are not cumulative) is skipped with a message appended to `errors`; the rest is kept.
    `counter(name, labels, value)` makes each counter sample and `histogram(sample)` finishes each
    histogram, in order (the pipeline adds the deltas there instead of building the samples twice).
    A ``X_created`` series is left out when it belongs to a family ``X`` or ``X_total`` (in 0.0.4 text
    prometheus_client writes it as a gauge family of its own); a gauge named so on its own is kept.
    """
    out: list[Sample] = []
    append = out.append
    names = {f.name for f in families}
    for fam in families:
        type_ = fam.type
        if type_ == "histogram":
            hists = _histograms(fam, errors)
            out.extend(hists if histogram is None else map(histogram, hists))
            continue
        is_counter = type_ == "counter" or (type_ in ("untyped", "unknown") and fam.name in counters)
        summary = type_ == "summary"
        skip: dict[str, int] = {}  # sample name -> 0 keep, 1 leave out (`_created`), 2 too long (an error)
        for name, labels, value in fam.samples:
            why = skip.get(name)
            if why is None:
                created = name.endswith("_created") and (
                    name != fam.name or name[:-8] in names or name[:-8] + "_total" in names
                )
                why = skip[name] = 1 if created else 2 if len(name) > MAX_NAME else 0
            if why == 1 or not isfinite(value) or (drop is not None and drop(value)):
                continue
            if why:
                if errors is not None:
                    errors.append(f"{name[:60]}...: metric name longer than {MAX_NAME} characters")
                continue
            # values are finite floats and labels str -> str here: skip re-validating ~1k samples a scrape
            if is_counter and value >= 0:
                append(counter(name, labels, value))
            elif not summary or "quantile" in labels:
                append(wire.gauge(name, labels, value))
    return out


_LE_VALUES: dict[str, float] = {}  # `le` label text -> bound (scrapes repeat the same few dozen)


def _le_value(text: str) -> float:
    value = _LE_VALUES.get(text)
    if value is None:
        value = parse_value(text)
        if len(_LE_VALUES) < 4096:
            _LE_VALUES[text] = value
    return value


def _histograms(fam: Family, errors: list[str] | None = None) -> list[HistogramSample]:
    groups: dict[frozenset[tuple[str, str]], dict] = {}  # label set without `le` -> the group, in order
    for s in fam.samples:
        base = dict(s.labels)
        le_text = base.pop("le", None)
        key = frozenset(base.items())
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"labels": base, "buckets": {}, "sum": 0.0, "count": None, "bad": None}
        name = s.name
        if le_text is not None and name.endswith("_bucket"):
            try:
                g["buckets"][_le_value(le_text)] = s.value
            except ValueError:
                g["bad"] = f"bucket bound le={le_text[:40]!r} is not a number"
        elif name.endswith("_sum"):
            g["sum"] = s.value
        elif name.endswith("_count"):
            g["count"] = s.value
    out = []
    for g in groups.values():
        if g["bad"] is not None:
            if errors is None:
                raise ValueError(f"{fam.name}: {g['bad']}")
            errors.append(f"{fam.name}{g['labels'] or ''}: {g['bad']}")
            continue
        finite = sorted((le, c) for le, c in g["buckets"].items() if math.isfinite(le))
        count = g["count"] if g["count"] is not None else g["buckets"].get(math.inf, finite[-1][1] if finite else 0.0)
        if not finite:
            continue
        try:
            out.append(
                HistogramSample(
                    name=fam.name,
                    labels=g["labels"],
                    le=[le for le, _ in finite],
                    counts=[c for _, c in finite],
                    count=count,
                    sum=g["sum"],
                )
            )
        except ValidationError as exc:
            if errors is None:
                raise
            errors.append(f"{fam.name}{g['labels'] or ''}: {exc.errors()[0]['msg']}")
    return out
