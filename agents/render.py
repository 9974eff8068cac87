"""Render values as Prometheus text exposition (0.0.4), or hand them to the pipeline as they are.

Native collectors (NVML, network probes, the streaming probe) describe what they measured with an
:class:`ExpositionWriter`, under the project's own metric names (``tailhound_*``, or an exporter's
names where tailhound measures the same thing, e.g. node_exporter's ``node_netstat_TcpExt_ListenOverflows``).
The writer keeps what it was given; ``text()`` renders the exposition a recording stores, and
``families()`` gives the pipeline exactly what parsing that text would give (same families, order,
names, labels and values), without rendering and parsing it every collection. Both feed the same
:func:`tailhound.agents.exposition.to_samples` and delta code, so live and replayed data follow one code path
(tests/agents/test_direct_samples.py checks ``families() == parse_exposition(text())``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from tailhound.agents.exposition import Family, RawSample
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


@lru_cache(maxsize=256)
def _bucket_bounds(le: tuple[float, ...]) -> tuple[str, ...]:
    """The ``le`` label values of a histogram's buckets, as the text renders them (+Inf last)."""
    return (*(format_value(b) for b in le), "+Inf")


def _labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """A copy the writer owns, with str values (the text renders ``str(value)``)."""
    if not labels:
        return {}
    copy = dict(labels)
    for v in copy.values():
        if v.__class__ is not str:
            return {k: v if v.__class__ is str else str(v) for k, v in copy.items()}
    return copy


class ExpositionWriter:
    """Collects families in order of first use and renders them with one HELP/TYPE header each.

    An entry is ``(name, labels, value)`` for gauges, counters and untyped values and ``(name, labels,
    le, counts, count, sum)`` for a histogram, with values as floats: a value that is not a number fails
    in the collector's call, as rendering it there did. ``-0.0`` renders as ``0``, so it becomes ``0.0``.
    """

    __slots__ = ("_families",)

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[tuple]]] = {}

    def _family(self, name: str, type_: str, help_: str) -> list[tuple]:
        fam = self._families.get(name)
        if fam is None:
            fam = (type_, help_, [])
            self._families[name] = fam
        elif fam[0] != type_:
            raise ValueError(f"{name} is a {fam[0]}, not a {type_}")
        return fam[2]

    def gauge(self, name: str, value: float, labels: Mapping[str, str] | None = None, help: str = "") -> None:
        self._family(name, "gauge", help).append((name, _labels(labels), float(value) + 0.0))

    def counter(self, name: str, value: float, labels: Mapping[str, str] | None = None, help: str = "") -> None:
        """A cumulative counter; `name` is the full sample name (by convention ending in ``_total``)."""
        self._family(name, "counter", help).append((name, _labels(labels), float(value) + 0.0))

    def untyped(self, name: str, value: float, labels: Mapping[str, str] | None = None, help: str = "") -> None:
        """A value without a type (node_exporter's netstat counters); the catalog decides its kind."""
        self._family(name, "untyped", help).append((name, _labels(labels), float(value) + 0.0))

    def add_rows(self, rows: Iterable[tuple[str, str, str, Mapping[str, str] | None, float | None]]) -> None:
        """``(type, name, help, labels, value)`` rows in order, each as the gauge/counter/untyped call
        would add it; a row whose value is None is left out. For collectors writing hundreds of values."""
        families = self._families
        for type_, name, help_, labels, value in rows:
            if value is None:
                continue
            fam = families.get(name)
            if fam is None:
                fam = families[name] = (type_, help_, [])
            elif fam[0] != type_:
                raise ValueError(f"{name} is a {fam[0]}, not a {type_}")
            fam[2].append((name, _labels(labels), float(value) + 0.0))

    def histogram(
        self,
        name: str,
        le: Sequence[float],
        counts: Sequence[float],
        count: float,
        sum: float,
        labels: Mapping[str, str] | None = None,
        help: str = "",
    ) -> None:
        if len(le) != len(counts):
            raise ValueError(f"{name}: {len(le)} bucket bounds but {len(counts)} counts")
        self._family(name, "histogram", help).append(
            (name, _labels(labels), tuple(le), [float(c) + 0.0 for c in counts], float(count) + 0.0, float(sum) + 0.0)
        )

    # -- what the pipeline takes ---------------------------------------------------------------------

    def families(self, entries_as_samples: bool = False) -> list[Family]:
        """What :func:`tailhound.agents.exposition.parse_exposition` returns for :meth:`text`.

        With `entries_as_samples` the gauge, counter and untyped entries are handed over as the plain
        ``(name, labels, value)`` tuples they are (equal to the RawSamples; what the pipeline reads)."""
        out = []
        for name, (type_, help_, entries) in self._families.items():
            if type_ != "histogram":
                samples = list(entries) if entries_as_samples else [RawSample(*e) for e in entries]
            else:
                samples = []
                for _, base, le, counts, count, sum_ in entries:
                    bounds = _bucket_bounds(le)
                    for bound, c in zip(bounds, (*counts, count), strict=True):
                        samples.append(RawSample(f"{name}_bucket", {**base, "le": bound}, c))
                    samples.append(RawSample(f"{name}_sum", base, sum_))
                    samples.append(RawSample(f"{name}_count", base, count))
            out.append(Family(name=name, type=type_, help=help_, samples=samples))
        return out

    # -- what a recording stores ------------------------------------------------------------------------

    def text(self) -> str:
        out: list[str] = []
        for name, (type_, help_, entries) in self._families.items():
            if help_:
                out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {type_}")
            if type_ != "histogram":
                out.extend(f"{n}{format_labels(labels)} {format_value(v)}" for n, labels, v in entries)
                continue
            for _, base, le, counts, count, sum_ in entries:
                for bound, c in zip(_bucket_bounds(le), (*counts, count), strict=True):
                    out.append(f"{name}_bucket{format_labels({**base, 'le': bound})} {format_value(c)}")
                out.append(f"{name}_sum{format_labels(base)} {format_value(sum_)}")
                out.append(f"{name}_count{format_labels(base)} {format_value(count)}")
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
