"""The canonical signal catalog: which source metric is which canonical signal (data in signals.yaml).

Each signal names its unit, kind (gauge, counter or histogram), the label(s) that identify the entity
a value belongs to (``per``), and for every source (snapshot ``source`` = recording ``job``) the
metric(s) that carry it. A source may list several metrics for one signal (vLLM V1 and V0 names,
both dcgm-exporter naming generations); ``match`` narrows a mapping to samples with given label
values (``probe_http_duration_seconds{phase="connect"}``) and ``scale`` converts units
(percent -> ratio). ``docs/signals.md`` is generated from this file (``tailhound catalog``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import yaml

from tailhound.errors import ConfigError

KINDS = ("gauge", "counter", "histogram")
_UNKNOWN = object()


@dataclass(frozen=True)
class SourceMetric:
    metric: str
    scale: float = 1.0
    match: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match)


@dataclass(frozen=True)
class SignalSpec:
    name: str
    unit: str
    kind: str
    per: tuple[str, ...]
    description: str
    sources: dict[str, tuple[SourceMetric, ...]] = field(default_factory=dict)

    def entity(self, labels: dict[str, str], common: dict[str, str]) -> str | None:
        """The entity a sample describes: its `per` label values joined by '/', '' for node-level
        signals. A sample without the label falls back to the snapshot's common labels, then to its
        ``instance`` (one engine per scraped server, as with TGI or vLLM V0); else it is not usable."""
        per = self.per
        if not per or per == ("node",):
            return ""
        if len(per) == 1:  # the usual case (gpu, engine, endpoint): no join
            label = per[0]
            v = labels.get(label, common.get(label))
            if v is None:
                v = labels.get("instance", common.get("instance"))
            return v
        parts = []
        for label in per:
            v = labels.get(label, common.get(label))
            if v is None:
                return None
            parts.append(v)
        return "/".join(parts)


@dataclass(frozen=True)
class Catalog:
    signals: dict[str, SignalSpec]
    #: (source, metric) -> the mappings of that metric, most specific (most `match` labels) first
    by_metric: dict[tuple[str, str], list[tuple[SignalSpec, SourceMetric]]]

    #: (source, metric) -> the answer of lookup() for metrics whose mappings match no labels (the answer
    #: then does not depend on the labels); ~60 lookups per snapshot made this the catalog's hot path
    _unconditional: dict[tuple[str, str], tuple[SignalSpec, float] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    #: (source, metric) -> the label names its mappings match on; ((source, metric), their values) -> answer
    _match_keys: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict, init=False, repr=False,
                                                                compare=False)
    _conditional: dict[tuple, tuple[SignalSpec, float] | None] = field(default_factory=dict, init=False,
                                                                       repr=False, compare=False)
    #: what callers derive from the catalog and keep with it (streams: per-metric extraction plans)
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def lookup(self, source: str, metric: str, labels: dict[str, str] | None = None) -> tuple[SignalSpec, float] | None:
        key = (source, metric)
        cached = self._unconditional.get(key, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        mappings = self.by_metric.get(key, ())
        if not any(sm.match for _, sm in mappings):
            found = (mappings[0][0], mappings[0][1].scale) if mappings else None
            if len(self._unconditional) < 65536:  # bounded: metric names come from the wire
                self._unconditional[key] = found
            return found
        labels = labels or {}
        match_keys = self._match_keys.get(key)
        if match_keys is None:
            match_keys = self._match_keys[key] = tuple(sorted({k for _, sm in mappings for k, _ in sm.match}))
        # the answer depends only on the values of the labels the mappings match on
        by_values = (key, tuple(labels.get(k) for k in match_keys))
        cached = self._conditional.get(by_values, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        found = next(((spec, sm.scale) for spec, sm in mappings if sm.matches(labels)), None)
        if len(self._conditional) < 65536:
            self._conditional[by_values] = found
        return found

    def spec(self, signal: str) -> SignalSpec | None:
        return self.signals.get(signal)

    def kind_of(self, source: str, metric: str) -> str | None:
        """The kind the catalog gives a source metric (for exporters that mistype, e.g. untyped counters)."""
        found = self.by_metric.get((source, metric))
        return found[0][0].kind if found else None

    def sources(self) -> list[str]:
        return sorted({src for spec in self.signals.values() for src in spec.sources})


def _source_metrics(value: object) -> tuple[SourceMetric, ...]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(SourceMetric(metric=item))
        elif isinstance(item, dict):
            unknown = set(item) - {"metric", "scale", "match"}
            if unknown:
                raise ValueError(f"unknown mapping keys {sorted(unknown)}")
            match = tuple(sorted((str(k), str(v)) for k, v in (item.get("match") or {}).items()))
            out.append(SourceMetric(metric=str(item["metric"]), scale=float(item.get("scale", 1.0)), match=match))
        else:
            raise ValueError(f"a source mapping must be a metric name or {{metric, scale, match}}, got {item!r}")
    return tuple(out)


def parse_catalog(data: dict, origin: str = "signals.yaml") -> Catalog:
    signals: dict[str, SignalSpec] = {}
    by_metric: dict[tuple[str, str], list[tuple[SignalSpec, SourceMetric]]] = {}
    for name, entry in (data.get("signals") or {}).items():
        try:
            unknown = set(entry) - {"unit", "kind", "per", "description", "sources"}
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            if entry["kind"] not in KINDS:
                raise ValueError(f"kind must be one of {KINDS}, got {entry['kind']!r}")
            per = entry.get("per")
            spec = SignalSpec(
                name=name,
                unit=str(entry.get("unit", "")),
                kind=str(entry["kind"]),
                per=tuple(per) if isinstance(per, list) else ((per,) if per else ()),
                description=str(entry.get("description", "")),
                sources={src: _source_metrics(v) for src, v in (entry.get("sources") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{origin}: signal {name}: {exc}") from exc
        signals[name] = spec
        for src, mappings in spec.sources.items():
            for sm in mappings:
                entries = by_metric.setdefault((src, sm.metric), [])
                if any(other.match == sm.match for _, other in entries):
                    raise ConfigError(f"{origin}: {src} metric {sm.metric} {dict(sm.match)} is mapped twice")
                if entries and entries[0][0].kind != spec.kind:
                    raise ConfigError(f"{origin}: {src} metric {sm.metric} is mapped as {entries[0][0].kind} "
                                      f"and as {spec.kind}")
                entries.append((spec, sm))
                entries.sort(key=lambda e: -len(e[1].match))
    return Catalog(signals=signals, by_metric=by_metric)


@cache
def default_catalog() -> Catalog:
    text = resources.files(__name__).joinpath("signals.yaml").read_text(encoding="utf-8")
    return parse_catalog(yaml.safe_load(text))
