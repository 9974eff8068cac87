"""How to make a missing canonical signal arrive: one :class:`Fix` per source that could carry it.

The advice is data: ``fixes.yaml`` (per source: what it is and how to turn it on; per metric: which
versions export it), dcgm-exporter's counters files (:mod:`tailhound.catalog.dcgm_counters`: the exact
line to add) and the catalog (which source metric is which signal). ``fixes_for`` only puts them
together, sources already seen first, so ``tailhound doctor`` and the worker give the same advice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from tailhound.capacity_file import CAPACITY_SIGNALS
from tailhound.errors import ConfigError

from . import Catalog, SignalSpec
from .dcgm_counters import COUNTERS_FILE_OPTION, counter_line, default_fields, known_counters


@dataclass(frozen=True)
class Fix:
    """One way to get a signal: the source that would send it, what to do, and a line to add verbatim."""

    source: str
    action: str
    line: str | None = None
    #: the source is there and has nothing that carries the signal (the data cannot show it)
    unavailable: bool = False

    @property
    def text(self) -> str:
        return f"{self.action}: {self.line}" if self.line else self.action


@dataclass(frozen=True)
class SourceAdvice:
    name: str
    enable: str
    group: str | None = None


@dataclass(frozen=True)
class FixBook:
    sources: dict[str, SourceAdvice]
    #: (job, metric) -> versions that export it, or what else it needs
    metrics: dict[tuple[str, str], str]
    #: signal -> a note for every fix of it
    signals: dict[str, str]

    def source(self, job: str) -> SourceAdvice:
        return self.sources.get(job) or SourceAdvice(name=f"job `{job}`", enable=f"scrape the `{job}` source")


def parse_fixbook(data: dict, origin: str = "fixes.yaml") -> FixBook:
    try:
        unknown = set(data) - {"sources", "metrics", "signals"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        sources = {str(job): SourceAdvice(name=str(v["name"]), enable=str(v["enable"]), group=v.get("group"))
                   for job, v in (data.get("sources") or {}).items()}
        metrics = {(str(job), str(metric)): str(note)
                   for job, notes in (data.get("metrics") or {}).items() for metric, note in notes.items()}
        signals = {str(k): str(v) for k, v in (data.get("signals") or {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{origin}: {exc!r}") from exc
    return FixBook(sources=sources, metrics=metrics, signals=signals)


@cache
def default_fixbook() -> FixBook:
    text = resources.files(__package__).joinpath("fixes.yaml").read_text(encoding="utf-8")
    return parse_fixbook(yaml.safe_load(text))


def signal_note(signal: str, book: FixBook | None = None) -> str | None:
    return (book or default_fixbook()).signals.get(signal)


def fixes_for(signal: str, catalog: Catalog, seen: Collection[str] = (), book: FixBook | None = None) -> list[Fix]:
    """Every way to get `signal`: a fix per source that maps it (sources in `seen` first), then, for each
    seen source of the same group that maps nothing to it (TGI for a vLLM-only counter, dcgm-exporter for
    an NVML-only field), an ``unavailable`` entry saying so. Never empty."""
    book = book or default_fixbook()
    if signal in CAPACITY_SIGNALS:
        return [Fix(source="capacity file", action="measure it: `tailhound loadtest` against a replica, then "
                    "`tailhound capacity RESULT.json --out capacity.yaml`, and set streams.capacity_file "
                    "(TAILHOUND_STREAMS__CAPACITY_FILE) to that file")]
    spec = catalog.spec(signal)
    if spec is None or not spec.sources:
        return [Fix(source="", action=f"no known source sends {signal}", unavailable=True)]
    jobs = sorted(spec.sources, key=lambda j: (j not in seen, list(spec.sources).index(j)))
    out = [_dcgm_fix(spec, j in seen, book) if j == "dcgm" else _metric_fix(spec, j, j in seen, book) for j in jobs]
    groups = {book.source(j).group for j in spec.sources} - {None}
    for job in sorted(seen):
        advice = book.source(job)
        if job not in spec.sources and advice.group in groups:
            out.append(Fix(source=job, action=f"{advice.name} sends nothing that carries {signal}", unavailable=True))
    return out


def _dcgm_fix(spec: SignalSpec, seen: bool, book: FixBook) -> Fix:
    names = [m.metric for m in spec.sources["dcgm"] if m.metric.startswith("DCGM_FI_")]
    if not names:
        names = [spec.sources["dcgm"][0].metric]
    field, older = names[0], [n for n in names[1:] if n in known_counters()]
    also = f" (older releases name it {' or '.join(older)})" if older else ""
    if field in default_fields():
        if seen:
            return Fix(source="dcgm", action=f"dcgm-exporter sent no {field} (on in its default "
                       "counters): the GPU or driver does not support it, or the counters file in use leaves it out")
        return Fix(source="dcgm", action=f"{book.source('dcgm').enable} (its default counters "
                   f"include {field})")
    line = counter_line(field) or f"{field}, {_kind(spec)}, {spec.description.replace(',', ';')}"
    where = f"add this line to dcgm-exporter's counters file ({COUNTERS_FILE_OPTION}){also}"
    if not seen:
        where += ", and scrape dcgm-exporter as job `dcgm`"
    if field.startswith("DCGM_FI_PROF_"):
        where += " (a profiling field: datacenter GPUs with DCGM's profiling module)"
    return Fix(source="dcgm", action=where, line=line)


def _kind(spec: SignalSpec) -> str:
    return spec.kind if spec.kind in ("gauge", "counter") else "gauge"


def _metric_fix(spec: SignalSpec, job: str, seen: bool, book: FixBook) -> Fix:
    advice = book.source(job)
    metrics = list(dict.fromkeys(m.metric for m in spec.sources[job]))
    alts = " or ".join(f"{m} ({book.metrics[(job, m)]})" if (job, m) in book.metrics else m for m in metrics)
    if seen:
        return Fix(source=job, action=f"{advice.name} sent no {alts}")
    return Fix(source=job, action=f"{advice.enable}: it sends {alts}")
