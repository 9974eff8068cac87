"""``tailhound doctor --prometheus URL``: which rules are blind given what a running Prometheus has.

One pull of its ``/federate`` with the selectors the federation ingest derives from the catalog (every job's
series, not only those of the jobs that are sources: a catalog metric under another job name is what the
doctor is here to point out), grouped and built into snapshots exactly as
:class:`~tailhound.ingest.federation.FederationPuller` does (same job -> source mapping, same node labels), so
the verdict is the one the ingest would give. Besides the rules: a job whose metric names are a catalog
source's other than its own name (``dcgm-exporter`` carrying dcgm's) gets the mapping that fixes it, and series
the grouping leaves out (no node label, a job that is no source name ...) are noted with an example.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import ValidationError

from tailhound.catalog import Catalog, default_catalog
from tailhound.doctor.observed import Observed, guess_job
from tailhound.errors import TailhoundError
from tailhound.ingest.federation import FederationConfig, FederationPuller
from tailhound.ingest.grouping import GroupingConfig

MAX_NOTES = 20


def parse_job_sources(specs: Iterable[str]) -> dict[str, str]:
    """``JOB=SOURCE`` options -> the grouping's ``sources`` mapping."""
    out: dict[str, str] = {}
    for spec in specs:
        job, sep, source = spec.partition("=")
        if not sep or not job.strip() or not source.strip():
            raise TailhoundError(f"--job-source {spec!r}: expected JOB=SOURCE, e.g. dcgm-exporter=dcgm")
        out[job.strip()] = source.strip()
    return out


def job_hints(seen: Observed, catalog: Catalog, job_sources: Mapping[str, str]) -> dict[str, str]:
    """Job -> the catalog source its metric names are, for the sources whose names map better to another
    catalog source than to their own (the jobs mapped to such a source are named, else the source itself)."""
    by_metric = catalog.by_metric
    out: dict[str, str] = {}
    for source, names in sorted(seen.metrics.items()):
        guess = guess_job(names, catalog)
        if guess is None or guess == source:
            continue
        if seen.mapped(source, catalog) >= sum(1 for n in names if (guess, n) in by_metric):
            continue
        for job in sorted(j for j, s in job_sources.items() if s == source) or [source]:
            out[job] = guess
    return out


async def observe_prometheus(
    url: str,
    *,
    job_sources: Mapping[str, str] | None = None,
    node_labels: Iterable[str] | None = None,
    timeout_s: float = 10.0,
    catalog: Catalog | None = None,
    bearer_token_file: Path | None = None,
) -> Observed:
    """What the Prometheus at `url` has of the catalog's metrics, per source, as the federation ingest sees it;
    a failed pull raises :class:`TailhoundError` naming why."""
    catalog = catalog or default_catalog()
    job_sources = dict(job_sources or {})
    grouping: dict = {"close_on_newer": True, "sources": job_sources}
    if node_labels:
        grouping["node_labels"] = tuple(node_labels)
    try:
        config = FederationConfig(
            url=url,
            timeout_s=timeout_s,
            by_job=False,
            grouping=GroupingConfig(**grouping),
            bearer_token_file=bearer_token_file,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'url'}: {e['msg']}" for e in exc.errors())
        raise TailhoundError(f"--prometheus {url!r}: {problems}") from None
    puller = FederationPuller(config, catalog=catalog)
    try:
        emitted = await puller.pull_once()
    finally:
        await puller.close()
    failed = [r for r in emitted.rejects if r.kind == "federate_failed"]
    if failed:
        raise TailhoundError(f"--prometheus: {failed[0].reason}")
    seen = Observed(path="prometheus")
    for snap in emitted.snapshots:
        seen.records += 1
        if snap.error is not None:
            seen.failed[snap.source] = seen.failed.get(snap.source, 0) + 1
            seen.nodes.setdefault(snap.source, set()).add(snap.node)
            continue
        seen.add(snap.source, snap.node, (s.name for s in snap.samples))
    for r in emitted.rejects[:MAX_NOTES]:
        example = r.payload.decode("utf-8", "replace")[:200]
        seen.notes.append(f"{r.count} series left out: {r.reason}" + (f" (e.g. {example})" if example else ""))
    if not emitted.snapshots:
        seen.notes.append(f"{puller.url} has none of the catalog's metrics (nor `up` of a job named as a source)")
    seen.hints.update(job_hints(seen, catalog, job_sources))
    return seen


def read_prometheus(
    url: str,
    *,
    job_sources: Mapping[str, str] | None = None,
    node_labels: Iterable[str] | None = None,
    timeout_s: float = 10.0,
    catalog: Catalog | None = None,
) -> Observed:
    """:func:`observe_prometheus` outside an event loop (the CLI)."""
    return asyncio.run(
        observe_prometheus(url, job_sources=job_sources, node_labels=node_labels, timeout_s=timeout_s, catalog=catalog)
    )
