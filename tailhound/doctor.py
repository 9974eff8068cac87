"""``tailhound doctor``: which rules can fire with the signals a recording, live targets or a Prometheus carry
(``--prometheus``: :mod:`tailhound.doctor_prometheus`, read as the federation ingest reads it).

What a source sends is read the way the agent reads it: each recorded (or scraped) collection becomes
a snapshot through :mod:`tailhound.agents.pipeline` (dcgm-exporter's NOT_SUPPORTED values dropped), and
the metric names it carries are mapped to catalog signals. The verdict per rule and the fixes come from
:mod:`tailhound.streams.coverage`; this module reads the input and prints.

Bounds on what comes from outside: at most :data:`MAX_TARGETS` targets, each scraped once with a
timeout and the agent's body limit (16 MiB); a recording is read line by line and a node's source is
parsed at most once per :data:`SAMPLE_EVERY_S` of recorded time (metric names rarely change).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tailhound.agents.collectors import CollectError
from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget
from tailhound.agents.pipeline import SnapshotBuilder
from tailhound.catalog import Catalog, default_catalog
from tailhound.errors import TailhoundError
from tailhound.recording import ScrapeRecord, read_records, require_records
from tailhound.streams.coverage import (
    RuleCoverage,
    best_fix,
    blind_critical,
    coverage,
    problem_lines,
    signals_of_metrics,
    summary,
)
from tailhound.streams.ruleset import RuleSet

MAX_TARGETS = 32
SAMPLE_EVERY_S = 60.0
_TARGET = re.compile(r"^(?:([a-z][a-z0-9_-]{0,39})=)?(https?://\S+)$")


@dataclass
class Observed:
    """What the input sent: per job, the metric names and the nodes; failed collections per job."""

    metrics: dict[str, set[str]] = field(default_factory=dict)
    nodes: dict[str, set[str]] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    records: int = 0
    #: job -> the catalog source its metric names are (a job named otherwise: map it)
    hints: dict[str, str] = field(default_factory=dict)
    #: what else the input told (series left out, an empty answer)
    notes: list[str] = field(default_factory=list)

    def add(self, job: str, node: str, names: Iterable[str]) -> None:
        self.metrics.setdefault(job, set()).update(names)
        self.nodes.setdefault(job, set()).add(node)

    def merge(self, other: Observed) -> None:
        for job, names in other.metrics.items():
            self.metrics.setdefault(job, set()).update(names)
        for job, nodes in other.nodes.items():
            self.nodes.setdefault(job, set()).update(nodes)
        for job, n in other.failed.items():
            self.failed[job] = self.failed.get(job, 0) + n
        self.records += other.records
        self.hints.update(other.hints)
        self.notes += other.notes

    def signals(self, catalog: Catalog) -> frozenset[str]:
        return signals_of_metrics(self.metrics, catalog)

    def mapped(self, job: str, catalog: Catalog) -> int:
        return sum(1 for m in self.metrics.get(job, ()) if (job, m) in catalog.by_metric)


def read_recordings(paths: Iterable[Path]) -> Observed:
    """The metric names each job sent in the recordings (failed collections counted, not read)."""
    seen = Observed()
    builder = SnapshotBuilder()
    last: dict[tuple, float] = {}
    paths = list(paths)
    for path in paths:
        for rec in read_records(path):
            seen.records += 1
            if rec.error is not None:
                seen.failed[rec.job] = seen.failed.get(rec.job, 0) + 1
                continue
            key = (rec.node, rec.job, tuple(sorted(rec.labels.items())))
            if key in last and abs(rec.ts - last[key]) < SAMPLE_EVERY_S:
                continue
            last[key] = rec.ts
            snap = builder.build(rec)
            if snap.error is None:
                seen.add(rec.job, rec.node, (s.name for s in snap.samples))
    if paths:
        require_records(seen.records, paths)
    return seen


def parse_target(spec: str) -> tuple[str | None, str]:
    """``[JOB=]URL`` -> (job or None, url)."""
    m = _TARGET.match(spec.strip())
    if m is None:
        raise TailhoundError(f"--target {spec!r}: expected [JOB=]http(s)://host:port/path, e.g. "
                             "dcgm=http://10.0.0.5:9400/metrics")
    return m.group(1), m.group(2)


def hint_text(job: str, source: str) -> str:
    """The fix for a job whose metric names are those of catalog source `source`."""
    return (f"job {job!r} carries {source} metrics: map it: sources: {{{job}: {source}}} "
            f"(doctor: --job-source {job}={source})")


def guess_job(names: Iterable[str], catalog: Catalog) -> str | None:
    """The catalog source that maps the most of `names` (None when none maps any, or two tie)."""
    names = set(names)
    scores = sorted(((sum(1 for n in names if (src, n) in catalog.by_metric), src) for src in catalog.sources()),
                    reverse=True)
    if not scores or scores[0][0] == 0 or (len(scores) > 1 and scores[1][0] == scores[0][0]):
        return None
    return scores[0][1]


def scrape_targets(specs: list[str], timeout_s: float, catalog: Catalog) -> Observed:
    """Scrape each target once (concurrently); a failed scrape or an unknown job is an error naming it."""
    return asyncio.run(collect_targets(specs, timeout_s, catalog))


async def collect_targets(specs: list[str], timeout_s: float, catalog: Catalog) -> Observed:
    """:func:`scrape_targets` inside a running event loop."""
    if len(specs) > MAX_TARGETS:
        raise TailhoundError(f"{len(specs)} targets: at most {MAX_TARGETS} at once")
    parsed = [parse_target(s) for s in specs]
    records = await _scrape_all(parsed, timeout_s)
    seen, problems = Observed(), []
    for (job, url), result in zip(parsed, records, strict=True):
        if isinstance(result, Exception):
            problems.append(f"{url}: {result}")
            continue
        seen.records += 1
        snap = SnapshotBuilder(catalog).build(result)
        if snap.error is not None:
            problems.append(f"{url}: {snap.error}")
            continue
        names = {s.name for s in snap.samples}
        if job is None:
            job = guess_job(names, catalog)
            if job is None:
                problems.append(f"{url}: cannot tell which source this is; name it: --target JOB={url} "
                                f"(one of {', '.join(catalog.sources())})")
                continue
            snap = SnapshotBuilder(catalog).build(result.model_copy(update={"job": job}))
            names = {s.name for s in snap.samples}
        seen.add(job, result.node, names)
    if problems:
        raise TailhoundError("scrape failed:\n  " + "\n  ".join(problems))
    return seen


async def _scrape_all(targets: list[tuple[str | None, str]], timeout_s: float) -> list[ScrapeRecord | Exception]:
    async def one(job: str | None, url: str) -> ScrapeRecord | Exception:
        collector = ScrapeCollector(ScrapeTarget(job=job or "unknown", url=url, timeout_s=timeout_s))
        try:
            return (await collector.collect())[0]
        except CollectError as exc:
            return exc
        finally:
            await collector.close()

    return list(await asyncio.gather(*(one(job, url) for job, url in targets)))


@dataclass
class DoctorReport:
    observed: Observed
    rules: list[RuleCoverage]

    @property
    def exit_code(self) -> int:
        """1 when a critical rule is blind, else 0."""
        return 1 if blind_critical(self.rules) else 0


def diagnose(rules: RuleSet, observed: Observed, catalog: Catalog | None = None,
             configured: Iterable[str] = ()) -> DoctorReport:
    """`configured`: signals the configuration gives (the capacity file's ``capacity.*``)."""
    catalog = catalog or default_catalog()
    sources = {job for job in observed.metrics if observed.mapped(job, catalog)}
    present = observed.signals(catalog) | frozenset(configured)
    return DoctorReport(observed=observed, rules=coverage(rules, present, catalog, sources))


def render_table(report: DoctorReport, catalog: Catalog | None = None) -> str:
    """Sources, one row per rule, then one line per problem (every fix, the likeliest first), a summary."""
    catalog = catalog or default_catalog()
    seen = report.observed
    lines = ["sources: " + (", ".join(
        f"{job} ({len(seen.nodes.get(job, ()))} node(s), {seen.mapped(job, catalog)} mapped metrics"
        + (f", {seen.failed[job]} failed collections" if seen.failed.get(job) else "") + ")"
        for job in sorted(set(seen.metrics) | set(seen.failed))) or "none")]
    lines += [f"hint: {hint_text(job, source)}" for job, source in sorted(seen.hints.items())]
    lines += [f"note: {note}" for note in seen.notes]
    lines.append("")
    rows = [("RULE", "SEVERITY", "STATUS", "ROOT CAUSE", "MISSING")]
    rows += [(c.rule, c.severity, c.status, c.root_cause, ", ".join(c.missing) or "-") for c in report.rules]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    problems = [c for c in report.rules if c.status != "ok"]
    if problems:
        lines.append("")
    for c in problems:
        found = problem_lines(c)
        for signal, line in zip(c.missing, found, strict=False):
            lines.append(line)
            best = best_fix(c, signal)
            lines += [f"    or: {f.text}" for f in c.fixes.get(signal, ()) if f is not best]
            if signal in c.notes:
                lines.append(f"    note: {c.notes[signal]}")
        lines += found[len(c.missing):]
        for signal in sorted(set(c.fixes) - set(c.missing)):
            lines += [f"    {signal}: {f.text}" for f in c.fixes[signal]]
    lines += ["", summary(report.rules)]
    return "\n".join(lines) + "\n"


def render_json(report: DoctorReport, catalog: Catalog | None = None) -> str:
    catalog = catalog or default_catalog()
    seen = report.observed
    data = {
        "sources": {job: {"nodes": sorted(seen.nodes.get(job, ())), "mapped_metrics": seen.mapped(job, catalog),
                          "failed_collections": seen.failed.get(job, 0)}
                    for job in sorted(set(seen.metrics) | set(seen.failed))},
        "job_hints": [{"job": job, "source": source, "fix": hint_text(job, source)}
                      for job, source in sorted(seen.hints.items())],
        "notes": list(seen.notes),
        "signals": sorted(seen.signals(catalog)),
        "rules": [c.to_dict() for c in report.rules],
        "summary": summary(report.rules),
        "blind_critical": [c.rule for c in blind_critical(report.rules)],
    }
    return json.dumps(data, indent=2) + "\n"
