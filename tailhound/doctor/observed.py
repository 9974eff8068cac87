"""What a recording or live targets carry, for ``tailhound doctor``: the metric names per source, read as the agent
reads them (each collection a snapshot through :mod:`tailhound.agents.snapshot_builder`).

Bounded: at most :data:`MAX_TARGETS` targets, each scraped once with a timeout and the agent's body limit; a
recording is read line by line and a node's source parsed at most once per :data:`SAMPLE_EVERY_S` of recorded time.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tailhound.agents.collectors import CollectError
from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import Catalog
from tailhound.errors import TailhoundError
from tailhound.recording import ScrapeRecord, read_records, require_records
from tailhound.streams.coverage import (
    signals_of_metrics,
)

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
    #: where it came from: the agent's scrapes (recordings, targets) or a Prometheus (the fixes' terms)
    path: str = "agent"

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
        if other.path != "agent":  # a Prometheus in the input: the fixes go in its terms
            self.path = other.path

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
        raise TailhoundError(
            f"--target {spec!r}: expected [JOB=]http(s)://host:port/path, e.g. dcgm=http://10.0.0.5:9400/metrics"
        )
    return m.group(1), m.group(2)


def hint_text(job: str, source: str) -> str:
    """The fix for a job whose metric names are those of catalog source `source`."""
    return (
        f"job {job!r} carries {source} metrics: map it: sources: {{{job}: {source}}} "
        f"(doctor: --job-source {job}={source})"
    )


def guess_job(names: Iterable[str], catalog: Catalog) -> str | None:
    """The catalog source that maps the most of `names` (None when none maps any, or two tie)."""
    names = set(names)
    scores = sorted(
        ((sum(1 for n in names if (src, n) in catalog.by_metric), src) for src in catalog.sources()), reverse=True
    )
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
                problems.append(
                    f"{url}: cannot tell which source this is; name it: --target JOB={url} "
                    f"(one of {', '.join(catalog.sources())})"
                )
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
