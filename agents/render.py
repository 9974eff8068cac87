"""Render values as Prometheus text exposition (0.0.4).

Native collectors (NVML, network probes, the streaming probe) describe what they measured this way,
with the project's own metric names (``tailhound_*``, or an exporter's names where tailhound measures
the same thing, e.g. node_exporter's ``node_netstat_TcpExt_ListenOverflows``). That text is what a
recording stores, and the same parser turns it into snapshot samples, so live and replayed data
follow one code path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from tailhound.snapshot import CounterSample, GaugeSample, HistogramSample


def format_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _escape(v: str) -> str:
    if "\\" not in v and "\n" not in v and '"' not in v:
        return v
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@lru_cache(maxsize=8192)
def _format_label_items(items: tuple[tuple[str, str], ...]) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in items) + "}"


def format_labels(labels: Mapping[str, str]) -> str:
    """Label set -> ``{a="1",b="2"}``; collectors repeat the same sets every collection, so it is cached."""
    if not labels:
        return ""
    return _format_label_items(tuple(labels.items()))


class ExpositionWriter:
    """Collects families in order of first use and renders them with one HELP/TYPE header each."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def _family(self, name: str, type_: str, help_: str) -> list[str]:
        fam = self._families.get(name)
        if fam is None:
            fam = (type_, help_, [])
            self._families[name] = fam
        elif fam[0] != type_:
            raise ValueError(f"{name} is a {fam[0]}, not a {type_}")
        return fam[2]

    def gauge(self, name: str, value: float, labels: Mapping[str, str] | None = None, help: str = "") -> None:
        self._family(name, "gauge", help).append(f"{name}{format_labels(labels or {})} {format_value(value)}")

    def counter(self, name: str, value: float, labels: Mapping[str, str] | None = None, help: str = "") -> None:
        """A cumulative counter; `name` is the full sample name (by convention ending in ``_total``)."""
        self._family(name, "counter", help).append(f"{name}{format_labels(labels or {})} {format_value(value)}")

    def histogram(self, name: str, le: Sequence[float], counts: Sequence[float], count: float, sum: float,
                  labels: Mapping[str, str] | None = None, help: str = "") -> None:
        lines = self._family(name, "histogram", help)
        base = dict(labels or {})
        for bound, c in zip(le, counts, strict=True):
            lines.append(f"{name}_bucket{format_labels({**base, 'le': format_value(bound)})} {format_value(c)}")
        lines.append(f"{name}_bucket{format_labels({**base, 'le': '+Inf'})} {format_value(count)}")
        lines.append(f"{name}_sum{format_labels(base)} {format_value(sum)}")
        lines.append(f"{name}_count{format_labels(base)} {format_value(count)}")

    def text(self) -> str:
        out: list[str] = []
        for name, (type_, help_, lines) in self._families.items():
            if help_:
                out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {type_}")
            out.extend(lines)
        return "\n".join(out) + ("\n" if out else "")


def render_samples(samples: Iterable[GaugeSample | CounterSample | HistogramSample]) -> str:
    """Snapshot samples -> exposition text that parses back to the same samples."""
    w = ExpositionWriter()
    for s in samples:
        if s.kind == "gauge":
            w.gauge(s.name, s.value, s.labels)
        elif s.kind == "counter":
            w.counter(s.name, s.value, s.labels)
        else:
            w.histogram(s.name, s.le, s.counts, s.count, s.sum, s.labels)
    return w.text()
