"""Scrape recordings: the public JSON-lines format of what agents collect (docs/recording-format.md).

One object per line, ``{"ts", "node", "job", "body"}`` with optional ``labels``, ``interval_s`` and ``error``;
readers ignore keys they do not know. Live scrapes and recorded lines become snapshots through the same code
(:mod:`tailhound.agents.snapshot_builder`), so record -> replay gives identical snapshots. A ``.gz`` name is written
gzip-compressed; readers tell gzip and zstd by the first bytes (:func:`compression_of`), so a renamed file reads.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tailhound.errors import TailhoundError

#: the first bytes of each compressed format readers recognise
MAGIC: dict[str, bytes] = {"gzip": b"\x1f\x8b", "zstd": b"\x28\xb5\x2f\xfd"}

#: Jobs the project knows (others are accepted so that new sources can be recorded first).
JOBS = ("vllm", "tgi", "nim", "sglang", "dcgm", "node", "blackbox", "nvml", "netprobe", "streamprobe")


class RecordingError(TailhoundError):
    def __init__(self, path: str, line_no: int, message: str) -> None:
        self.path, self.line_no = path, line_no
        super().__init__(f"{path}:{line_no}: {message}")


class ScrapeRecord(BaseModel):
    """One collection of one job on one node, as exposition text."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ts: float = Field(gt=0, allow_inf_nan=False, description="Unix seconds of the collection.")
    node: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^\S+$",
        description="Host the scrape describes (for probes: the probed target's host).",
    )
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


class EmptyRecordingError(TailhoundError):
    """A command that reads recordings read no record at all (an empty, wrong or unreadable file)."""


def require_records(count: int, paths: Iterable[str | Path]) -> None:
    """Raise when `count` records were read from `paths`: nothing to replay is an error, not a success."""
    if count == 0:
        names = ", ".join(str(p) for p in paths) or "(no file given)"
        raise EmptyRecordingError(
            f"read no records from {names}: is it a recording (JSON lines, "
            "docs/recording-format.md; plain, gzip or zstd)?"
        )


def compression_of(path: str | Path) -> str | None:
    """``gzip``, ``zstd`` or None (plain text), from the file's first bytes."""
    with Path(path).open("rb") as fh:
        head = fh.read(4)
    return next((kind for kind, magic in MAGIC.items() if head.startswith(magic)), None)


def open_for_writing(path: str | Path) -> IO[str]:
    """A text stream writing the recording `path`: gzip-compressed when the name ends in ``.gz``."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".zst", ".zstd"):
        # writing zstd would need an optional package; plain text under a .zst name would not read back
        raise TailhoundError(f"{p}: recordings are written plain or gzip (.gz); compress with `zstd` afterwards")
    p.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".gz":
        return gzip.open(p, "wt", encoding="utf-8")
    return p.open("w", encoding="utf-8")


def _open_text(p: Path) -> IO[str]:
    kind = compression_of(p)
    if kind == "gzip":
        return gzip.open(p, "rt", encoding="utf-8")
    if kind == "zstd":
        import io

        import cramjam

        return io.TextIOWrapper(io.BytesIO(bytes(cramjam.zstd.decompress(p.read_bytes()))), encoding="utf-8")
    return p.open(encoding="utf-8")


def read_records(path: str | Path) -> Iterator[ScrapeRecord]:
    """Yield the records of a recording (plain, gzip or zstd) in file order; a bad line raises naming the
    file and line."""
    p = Path(path)
    try:
        fh = _open_text(p)
    except OSError as exc:
        raise RecordingError(str(p), 0, f"cannot open: {exc.strerror}") from None
    except Exception as exc:  # a corrupt zstd frame (cramjam raises plain errors)
        raise RecordingError(str(p), 0, f"cannot decompress: {exc}") from None
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
