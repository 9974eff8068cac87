"""Prometheus text exposition (0.0.4) and OpenMetrics text -> snapshot samples.

The agents issue scrapes vLLM, TGI, NIM, dcgm-exporter, node_exporter and blackbox_exporter; this is
the parsing half of that: families with their TYPE, samples with unescaped labels, histograms
regrouped from ``_bucket``/``_sum``/``_count`` series into one :class:`HistogramSample` per label set.
``_created`` series (prometheus_client adds them to counters and histograms) are dropped; counters
keep the name they are scraped under (``vllm:prompt_tokens_total``). Every error names the line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import lru_cache
from math import isfinite
from typing import NamedTuple

from pydantic import ValidationError

from tailhound.agents import wire
from tailhound.errors import TailhoundError
from tailhound.snapshot import CounterSample, GaugeSample, HistogramSample

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_NAME_RE = re.compile(_NAME)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
MAX_NAME = 200  # the wire model's limit


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


def parse_value(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(text)


@lru_cache(maxsize=8192)
def _label_items(text: str, line_no: int) -> tuple[tuple[str, str], ...]:
    inner = text[1:-1].strip()
    labels: list[tuple[str, str]] = []
    pos = 0
    while pos < len(inner):
        m = _LABEL.match(inner, pos)
        if not m:
            raise ExpositionError(line_no, f"malformed labels {text!r}")
        value = m.group(2)
        if "\\" in value:
            value = re.sub(r"\\[\\\"n]", lambda e: _ESCAPES[e.group(0)], value)
        labels.append((m.group(1), value))
        pos = m.end()
    return tuple(labels)


def _parse_label_text(text: str, line_no: int) -> tuple[tuple[str, str], ...]:
    """Label text -> label items (cached)."""
    return _label_items(text, line_no)


def _forget_parsed() -> None:
    """Forget the label sets and series seen so far (what a first scrape of a target pays for)."""
    _label_items.cache_clear()
    _SERIES.clear()


_parse_label_text.cache_clear = _forget_parsed  # bench/parse_speed.py's "first scrape" clears both caches


def _parse_labels(text: str, line_no: int) -> tuple[tuple[str, str], ...]:
    """Label text -> label items. Scrapes repeat the same label sets every time, so parsing is cached."""
    try:
        return _label_items(text, 0)
    except ExpositionError as exc:
        raise ExpositionError(line_no, str(exc).split(": ", 1)[1]) from None


def _family_of(name: str, families: dict[str, Family]) -> Family:
    if name in families:
        return families[name]
    for suffix in (*_HISTOGRAM_SUFFIXES, "_created", "_total"):
        base = name.removesuffix(suffix)
        if base != name and base in families:
            return families[base]
    fam = Family(name=name)
    families[name] = fam
    return fam


def _split_sample(line: str, line_no: int) -> tuple[str, str, str]:
    """``name{labels} value [timestamp]`` -> (name, label text or '', value text)."""
    brace = line.find("{")
    if brace >= 0:
        close = line.rfind("}")
        if close < brace:
            raise ExpositionError(line_no, f"not a sample line: {line[:80]!r}")
        name, label_text, rest = line[:brace].rstrip(), line[brace:close + 1], line[close + 1:].split()
    else:
        parts = line.split()
        name, label_text, rest = parts[0], "", parts[1:]
    if not rest or len(rest) > 2 or not _NAME_RE.fullmatch(name):
        raise ExpositionError(line_no, f"not a sample line: {line[:80]!r}")
    return name, label_text, rest[0]


_raw_sample = tuple.__new__  # RawSample(name, labels, value) without the generated __new__'s call overhead

#: ``name{labels}`` text -> (name, label items) of series parsed before: scrapes repeat the same series
#: every time, so a known one skips splitting, the name check and the label parser.
_SERIES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
_MAX_SERIES = 50_000


def parse_exposition(text: str) -> list[Family]:
    """Parse Prometheus text or OpenMetrics text into families, in order of appearance."""
    families: dict[str, Family] = {}
    family_of: dict[str, Family] = {}  # sample name -> family, memoised (suffix lookups are not free)
    for line_no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                fam = families.setdefault(parts[2], Family(name=parts[2]))
                if parts[1] == "TYPE":
                    fam.type = parts[3].strip() if len(parts) > 3 else "untyped"
                else:
                    fam.help = parts[3] if len(parts) > 3 else ""
            continue  # comments, `# EOF`, `# UNIT`
        close = line.rfind("}")
        known = _SERIES.get(line[:close + 1]) if close > 0 else None
        rest = line[close + 1:].split() if known is not None else ()
        if known is not None and 0 < len(rest) <= 2:  # a series seen before: only the value is new
            name, value_text = known[0], rest[0]
            labels = dict(known[1])
        else:
            name, label_text, value_text = _split_sample(line, line_no)
            if label_text:
                items = _parse_labels(label_text, line_no)
                labels = dict(items)
                if len(_SERIES) >= _MAX_SERIES:
                    _SERIES.clear()
                _SERIES[line[:close + 1]] = (name, items)
            else:
                labels = {}
        try:
            value = float(value_text)  # also takes NaN, +Inf, -Inf
        except ValueError:
            raise ExpositionError(line_no, f"{name}: value {value_text!r} is not a number") from None
        fam = family_of.get(name)
        if fam is None:
            fam = family_of[name] = _family_of(name, families)
        fam.samples.append(_raw_sample(RawSample, (name, labels, value)))
    return [f for f in families.values() if f.samples]


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
    """
    out: list[Sample] = []
    append = out.append
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
                why = skip[name] = 1 if name.endswith("_created") else 2 if len(name) > MAX_NAME else 0
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
            g = groups[key] = {"labels": base, "buckets": {}, "sum": 0.0, "count": None}
        name = s.name
        if le_text is not None and name.endswith("_bucket"):
            g["buckets"][_le_value(le_text)] = s.value
        elif name.endswith("_sum"):
            g["sum"] = s.value
        elif name.endswith("_count"):
            g["count"] = s.value
    out = []
    for g in groups.values():
        finite = sorted((le, c) for le, c in g["buckets"].items() if math.isfinite(le))
        count = g["count"] if g["count"] is not None else g["buckets"].get(math.inf, finite[-1][1] if finite else 0.0)
        if not finite:
            continue
        try:
            out.append(HistogramSample(name=fam.name, labels=g["labels"], le=[le for le, _ in finite],
                                       counts=[c for _, c in finite], count=count, sum=g["sum"]))
        except ValidationError as exc:
            if errors is None:
                raise
            errors.append(f"{fam.name}{g['labels'] or ''}: {exc.errors()[0]['msg']}")
    return out
