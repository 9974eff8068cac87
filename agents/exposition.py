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

from pydantic import ValidationError

from tailhound.errors import TailhoundError
from tailhound.snapshot import CounterSample, GaugeSample, HistogramSample

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(\{{.*\}})?\s+(\S+)(?:\s+(\S+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class ExpositionError(TailhoundError):
    def __init__(self, line_no: int, message: str) -> None:
        self.line_no = line_no
        super().__init__(f"line {line_no}: {message}")


@dataclass
class RawSample:
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


def _parse_labels(text: str, line_no: int) -> dict[str, str]:
    inner = text[1:-1].strip()
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        m = _LABEL.match(inner, pos)
        if not m:
            raise ExpositionError(line_no, f"malformed labels {text!r}")
        labels[m.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _ESCAPES[e.group(0)], m.group(2))
        pos = m.end()
    return labels


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


def parse_exposition(text: str) -> list[Family]:
    """Parse Prometheus text or OpenMetrics text into families, in order of appearance."""
    families: dict[str, Family] = {}
    for line_no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                fam = families.setdefault(parts[2], Family(name=parts[2]))
                if parts[1] == "TYPE":
                    fam.type = parts[3].strip() if len(parts) > 3 else "untyped"
                else:
                    fam.help = parts[3] if len(parts) > 3 else ""
            continue  # comments, `# EOF`, `# UNIT`
        m = _SAMPLE.match(line)
        if not m:
            raise ExpositionError(line_no, f"not a sample line: {line[:80]!r}")
        name, label_text, value_text = m.group(1), m.group(2), m.group(3)
        try:
            value = parse_value(value_text)
        except ValueError:
            raise ExpositionError(line_no, f"{name}: value {value_text!r} is not a number") from None
        labels = _parse_labels(label_text, line_no) if label_text else {}
        _family_of(name, families).samples.append(RawSample(name, labels, value))
    return [f for f in families.values() if f.samples]


Sample = GaugeSample | CounterSample | HistogramSample


def to_samples(
    families: list[Family],
    drop: Callable[[float], bool] | None = None,
    counters: Collection[str] = (),
    errors: list[str] | None = None,
) -> list[Sample]:
    """Families -> wire samples.

    NaN, infinities and values `drop` says are sentinels (dcgm-exporter's NOT_SUPPORTED) are left
    out: absent, not 0. Untyped families named in `counters` become counters (node_exporter exposes
    its netstat counters untyped). A family that cannot become a valid sample (a histogram whose
    buckets are not cumulative) is skipped with a message appended to `errors`; the rest is kept.
    """
    out: list[Sample] = []
    for fam in families:
        if fam.type == "histogram":
            out.extend(_histograms(fam, errors))
            continue
        is_counter = fam.type == "counter" or (fam.type in ("untyped", "unknown") and fam.name in counters)
        for s in fam.samples:
            if s.name.endswith("_created") or math.isnan(s.value) or math.isinf(s.value):
                continue
            if drop is not None and drop(s.value):
                continue
            if is_counter and s.value >= 0:
                out.append(CounterSample(name=s.name, labels=s.labels, value=s.value))
            elif fam.type != "summary" or "quantile" in s.labels:
                out.append(GaugeSample(name=s.name, labels=s.labels, value=s.value))
    return out


def _histograms(fam: Family, errors: list[str] | None = None) -> list[HistogramSample]:
    groups: dict[tuple[tuple[str, str], ...], dict] = {}
    for s in fam.samples:
        base = {k: v for k, v in s.labels.items() if k != "le"}
        g = groups.setdefault(tuple(sorted(base.items())), {"labels": base, "buckets": {}, "sum": 0.0, "count": None})
        if s.name.endswith("_bucket") and "le" in s.labels:
            g["buckets"][parse_value(s.labels["le"])] = s.value
        elif s.name.endswith("_sum"):
            g["sum"] = s.value
        elif s.name.endswith("_count"):
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
