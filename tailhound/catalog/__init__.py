"""The canonical signal catalog: which source metric is which canonical signal (data in signals.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import yaml

from tailhound.errors import ConfigError


@dataclass(frozen=True)
class SourceMetric:
    metric: str
    scale: float = 1.0


@dataclass(frozen=True)
class SignalSpec:
    name: str
    unit: str
    kind: str
    per: str | None
    description: str
    sources: dict[str, SourceMetric] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    signals: dict[str, SignalSpec]
    #: (source, metric) -> (canonical signal, scale)
    by_metric: dict[tuple[str, str], tuple[SignalSpec, float]]

    def lookup(self, source: str, metric: str) -> tuple[SignalSpec, float] | None:
        return self.by_metric.get((source, metric))

    def spec(self, signal: str) -> SignalSpec | None:
        return self.signals.get(signal)


def parse_catalog(data: dict, origin: str = "signals.yaml") -> Catalog:
    try:
        raw = data["signals"]
        signals: dict[str, SignalSpec] = {}
        by_metric: dict[tuple[str, str], tuple[SignalSpec, float]] = {}
        for name, entry in raw.items():
            sources = {
                src: SourceMetric(metric=str(m["metric"]), scale=float(m.get("scale", 1.0)))
                for src, m in (entry.get("sources") or {}).items()
            }
            spec = SignalSpec(
                name=name,
                unit=str(entry.get("unit", "")),
                kind=str(entry["kind"]),
                per=entry.get("per"),
                description=str(entry.get("description", "")),
                sources=sources,
            )
            signals[name] = spec
            for src, sm in sources.items():
                if (src, sm.metric) in by_metric:
                    raise ConfigError(f"{origin}: {src} metric {sm.metric} is mapped twice")
                by_metric[(src, sm.metric)] = (spec, sm.scale)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{origin}: invalid signal catalog: {exc!r}") from exc
    return Catalog(signals=signals, by_metric=by_metric)


@cache
def default_catalog() -> Catalog:
    text = resources.files(__name__).joinpath("signals.yaml").read_text(encoding="utf-8")
    return parse_catalog(yaml.safe_load(text))
