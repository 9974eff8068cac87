"""Scrape recordings: the public JSON-lines format of what agents collect (docs/recording-format.md).

One JSON object per line::

    {"ts": 1764400000.0, "node": "gpu-node-1", "job": "vllm", "body": "<Prometheus text exposition>"}

Optional keys (readers ignore keys they do not know):

- ``labels``: labels the agent adds to every sample of the scrape (``instance``, ``cluster``, ...);
  they become the snapshot's common labels.
- ``interval_s``: the collection interval, so a replay can tell a gap from a pause.
- ``error``: the collection failed (the body is then empty); replay publishes it as a gap.

The same parsing and mapping code (:mod:`tailhound.agents.pipeline`) turns live scrapes and recorded lines
into snapshots, so record -> replay gives identical snapshots.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tailhound.errors import TailhoundError

#: Jobs the project knows (others are accepted so that new sources can be recorded first).
JOBS = ("vllm", "tgi", "nim", "dcgm", "node", "blackbox", "nvml", "netprobe", "streamprobe")


class RecordingError(TailhoundError):
    def __init__(self, path: str, line_no: int, message: str) -> None:
        self.path, self.line_no = path, line_no
        super().__init__(f"{path}:{line_no}: {message}")


class ScrapeRecord(BaseModel):
    """One collection of one job on one node, as exposition text."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ts: float = Field(gt=0, allow_inf_nan=False, description="Unix seconds of the collection.")
    node: str = Field(min_length=1, max_length=200, pattern=r"^\S+$",
                      description="Host the scrape describes (for probes: the probed target's host).")
    job: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$", description="Source kind: " + ", ".join(JOBS) + ", ...")
    body: str = Field(default="", description="Prometheus text (0.0.4) or OpenMetrics exposition.")
    labels: dict[str, str] = Field(default_factory=dict)
    interval_s: float | None = Field(default=None, gt=0)
    error: str | None = None

    def to_line(self) -> str:
        data = self.model_dump(exclude_defaults=True)
        data.setdefault("body", self.body)
        ordered = {k: data[k] for k in ("ts", "node", "job", "body") if k in data}
        ordered.update({k: v for k, v in data.items() if k not in ordered})
        return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))


def write_records(out: IO[str], records: Iterable[ScrapeRecord]) -> int:
    n = 0
    for rec in records:
        out.write(rec.to_line() + "\n")
        n += 1
    return n


def read_records(path: str | Path) -> Iterator[ScrapeRecord]:
    """Yield the records of a recording in file order; a bad line raises naming the file and line."""
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8")
    except OSError as exc:
        raise RecordingError(str(p), 0, f"cannot open: {exc.strerror}") from None
    with fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield ScrapeRecord.model_validate_json(line)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(x) for x in err["loc"]) or "line"
                raise RecordingError(str(p), line_no, f"{where}: {err['msg']}") from None
