"""The simulated fleet as a scrape recording (``tailhound simulate --record FILE``).

Each snapshot the simulator makes becomes one recording line (docs/recording-format.md): the
snapshot's samples rendered as Prometheus text, its source as the job, its common labels as the
record labels. Replaying the file (``tailhound agent --from-recording FILE``) runs it through the
agent's pipeline, so the replayed snapshots carry the same gauges, and counters and histograms get
their deltas from the second collection on, exactly as live collection would give them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tailhound.agents.render import render_samples
from tailhound.recording import ScrapeRecord, open_for_writing, write_records
from tailhound.snapshot import Snapshot

from .fleet import FleetSimulator


def snapshot_to_record(snapshot: Snapshot) -> ScrapeRecord:
    """One simulated snapshot -> the recording line a collector would have written for it."""
    return ScrapeRecord(
        ts=snapshot.ts,
        node=snapshot.node,
        job=snapshot.source,
        body=render_samples(snapshot.samples),
        labels=dict(snapshot.labels),
        interval_s=snapshot.interval_s,
        error=snapshot.error,
    )


def iter_records(sim: FleetSimulator, minutes: float) -> Iterator[ScrapeRecord]:
    """The records of `minutes` of fleet time, tick by tick (time order per node and source)."""
    for _ts, snapshots in sim.run(minutes * 60):
        for snap in snapshots:
            yield snapshot_to_record(snap)


def write_recording(sim: FleetSimulator, minutes: float, path: str | Path) -> int:
    """Run `sim` for `minutes` of fleet time and write every snapshot to `path` (gzip for a ``.gz`` name);
    returns the line count."""
    with open_for_writing(path) as fh:
        return write_records(fh, iter_records(sim, minutes))
