"""How to make a missing canonical signal arrive: one :class:`Fix` per source that could carry it.

The advice is data: ``fixes.yaml`` (per source: what it is and how to turn it on, in the terms of each
path; per metric: which versions export it; per exporter: the flags whose defaults leave catalog metrics
out), dcgm-exporter's counters files (:mod:`tailhound.catalog.dcgm_counters`: the exact line to add) and
the catalog (which source metric is which signal). ``fixes_for`` only puts them together, sources already
seen first, so ``tailhound doctor`` and the worker give the same advice.

A path is where the telemetry comes from: ``agent`` (the node agent: fixes in agent.yaml terms) or
``prometheus`` (``tailhound ingest``: fixes in prometheus.yml and ingest.yaml terms; a source only the agent
has, such as nvml, says so).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from tailhound.capacity_file import CAPACITY_SIGNALS
from tailhound.errors import ConfigError
from tailhound.yamlfile import safe_load

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
    #: where `line` goes (a counters file, an exporter's command line), and a remark on it
    into: str | None = None
    remark: str | None = None

    @property
    def text(self) -> str:
        return f"{self.action}: {self.line}" if self.line else self.action


PATHS = ("agent", "prometheus")
#: what a Prometheus-path fix adds for a job named otherwise than the source
_MAPPING = " (a job of another name: map it in ingest.yaml, remote_write.grouping.sources: {{<job>: {source}}})"


@dataclass(frozen=True)
class SourceAdvice:
    name: str
    enable: str
    group: str | None = None
    #: how to get it through Prometheus (None: only the agent sends it)
    prometheus: str | None = None

    def how(self, path: str, source: str) -> str:
        """How to turn the source on, in the terms of `path`."""
        if path == "agent":
            return self.enable
        if self.prometheus is None:
            return (
                f"no exporter sends this; only the tailhound agent does: run `tailhound agent` on the nodes "
                f"next to the ingest and {self.enable[0].lower()}{self.enable[1:]}"
            )
        return self.prometheus + _MAPPING.format(source=source)


@dataclass(frozen=True)
class FlagAdvice:
    """An exporter flag whose default leaves catalog metrics out, and the value that adds them."""

    flag: str
    default: str
    value: str
    metrics: tuple[str, ...] = field(default=())

    @property
    def line(self) -> str:
        """The flag as it goes on the exporter's command line (single-quoted for a shell)."""
        return f"{self.flag}='{self.value}'"


@dataclass(frozen=True)
class FixBook:
    sources: dict[str, SourceAdvice]
    #: (job, metric) -> versions that export it, or what else it needs
    metrics: dict[tuple[str, str], str]
    #: signal -> a note for every fix of it
    signals: dict[str, str]
    #: job -> its exporter's flags that leave catalog metrics out by default
    flags: dict[str, tuple[FlagAdvice, ...]] = field(default_factory=dict)

    def source(self, job: str) -> SourceAdvice:
        return self.sources.get(job) or SourceAdvice(
            name=f"job `{job}`",
            enable=f"scrape the `{job}` source",
            prometheus=f"scrape the `{job}` source in prometheus.yml",
        )

    def flag_for(self, job: str, metric: str) -> FlagAdvice | None:
        """The flag that makes `job`'s exporter send `metric`, when its default does not."""
        return next((f for f in self.flags.get(job, ()) if metric in f.metrics), None)


def parse_fixbook(data: dict, origin: str = "fixes.yaml") -> FixBook:
    try:
        unknown = set(data) - {"sources", "metrics", "signals", "flags"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        sources = {
            str(job): SourceAdvice(
                name=str(v["name"]), enable=str(v["enable"]), group=v.get("group"), prometheus=v.get("prometheus")
            )
            for job, v in (data.get("sources") or {}).items()
        }
        metrics = {
            (str(job), str(metric)): str(note)
            for job, notes in (data.get("metrics") or {}).items()
            for metric, note in notes.items()
        }
        signals = {str(k): str(v) for k, v in (data.get("signals") or {}).items()}
        flags = {
            str(job): tuple(
                FlagAdvice(
                    flag=str(f["flag"]),
                    default=str(f["default"]),
                    value=str(f["value"]),
                    metrics=tuple(str(m) for m in f["metrics"]),
                )
                for f in entries
            )
            for job, entries in (data.get("flags") or {}).items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{origin}: {exc!r}") from exc
    return FixBook(sources=sources, metrics=metrics, signals=signals, flags=flags)


@cache
def default_fixbook() -> FixBook:
    text = resources.files(__package__).joinpath("fixes.yaml").read_text(encoding="utf-8")
    return parse_fixbook(safe_load(text))


def signal_note(signal: str, book: FixBook | None = None) -> str | None:
    return (book or default_fixbook()).signals.get(signal)


def fixes_for(
    signal: str, catalog: Catalog, seen: Collection[str] = (), book: FixBook | None = None, path: str = "agent"
) -> list[Fix]:
    """Every way to get `signal` on `path` (:data:`PATHS`): a fix per source that maps it (sources in `seen`
    first; on the Prometheus path, sources only the agent has last), then, for each seen source of the same
    group that maps nothing to it (TGI for a vLLM-only counter, dcgm-exporter for an NVML-only field), an
    ``unavailable`` entry saying so. Never empty."""
    if path not in PATHS:
        raise ValueError(f"path {path!r}: one of {', '.join(PATHS)}")
    book = book or default_fixbook()
    if signal in CAPACITY_SIGNALS:
        return [
            Fix(
                source="capacity file",
                action="measure it: `tailhound loadtest` against a replica, then "
                "`tailhound capacity RESULT.json --out capacity.yaml`, and set streams.capacity_file "
                "(TAILHOUND_STREAMS__CAPACITY_FILE) to that file",
            )
        ]
    spec = catalog.spec(signal)
    if spec is None or not spec.sources:
        return [Fix(source="", action=f"no known source sends {signal}", unavailable=True)]
    order = list(spec.sources)

    def rank(job: str) -> tuple[bool, bool, int]:
        agent_only = path == "prometheus" and book.source(job).prometheus is None
        return job not in seen, agent_only, order.index(job)

    jobs = sorted(spec.sources, key=rank)
    out = [
        _dcgm_fix(spec, j in seen, book, path) if j == "dcgm" else _metric_fix(spec, j, j in seen, book, path)
        for j in jobs
    ]
    groups = {book.source(j).group for j in spec.sources} - {None}
    for job in sorted(seen):
        advice = book.source(job)
        if job not in spec.sources and advice.group in groups:
            out.append(Fix(source=job, action=f"{advice.name} sends nothing that carries {signal}", unavailable=True))
    return out


def _dcgm_fix(spec: SignalSpec, seen: bool, book: FixBook, path: str = "agent") -> Fix:
    names = [m.metric for m in spec.sources["dcgm"] if m.metric.startswith("DCGM_FI_")]
    if not names:
        names = [spec.sources["dcgm"][0].metric]
    field, older = names[0], [n for n in names[1:] if n in known_counters()]
    also = f" (older releases name it {' or '.join(older)})" if older else ""
    if field in default_fields():
        if seen:
            return Fix(
                source="dcgm",
                action=f"dcgm-exporter sent no {field} (on in its default "
                "counters): the GPU or driver does not support it, or the counters file in use leaves it out",
            )
        return Fix(
            source="dcgm", action=f"{book.source('dcgm').how(path, 'dcgm')} (its default counters include {field})"
        )
    line = counter_line(field) or f"{field}, {_kind(spec)}, {spec.description.replace(',', ';')}"
    into = f"dcgm-exporter's counters file ({COUNTERS_FILE_OPTION})"
    where = f"add this line to {into}{also}"
    if not seen:
        where += (
            ", and scrape dcgm-exporter as job `dcgm`"
            if path == "agent"
            else ", and scrape dcgm-exporter in prometheus.yml as job `dcgm`"
        )
    remark = also.strip(" ()") or None
    if field.startswith("DCGM_FI_PROF_"):
        where += " (a profiling field: datacenter GPUs with DCGM's profiling module)"
        remark = "a profiling field: datacenter GPUs with DCGM's profiling module"
    return Fix(source="dcgm", action=where, line=line, into=into, remark=remark)


def _kind(spec: SignalSpec) -> str:
    return spec.kind if spec.kind in ("gauge", "counter") else "gauge"


def _metric_fix(spec: SignalSpec, job: str, seen: bool, book: FixBook, path: str = "agent") -> Fix:
    advice = book.source(job)
    metrics = list(dict.fromkeys(m.metric for m in spec.sources[job]))
    flag = next((f for m in metrics if (f := book.flag_for(job, m)) is not None), None)
    if flag is not None:
        # the exporter sends it only with a flag: the flag is the fix on either path
        left_out = ", ".join(flag.metrics)  # all it adds: one line for every signal the flag gives
        action = f"run {advice.name} with this flag (its default {flag.flag} leaves out {left_out})"
        if not seen:
            action = (
                f"{advice.how(path, job)}; {advice.name} needs this flag (its default {flag.flag} leaves out "
                f"{left_out})"
            )
        return Fix(
            source=job,
            action=action,
            line=flag.line,
            into=f"{advice.name}'s command line",
            remark=f"its default {flag.flag} leaves out {left_out}",
        )
    alts = " or ".join(f"{m} ({book.metrics[(job, m)]})" if (job, m) in book.metrics else m for m in metrics)
    if seen:
        return Fix(source=job, action=f"{advice.name} sent no {alts}")
    return Fix(source=job, action=f"{advice.how(path, job)}: it sends {alts}")
