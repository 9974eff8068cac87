"""Reading scrape recordings for backtests and replays: plain, gzip or zstd, tolerant of a cut-off end.

``iter_recording(path)`` yields the :class:`~tailhound.recording.ScrapeRecord` lines of one file like
:func:`tailhound.recording.read_records`, with three differences that matter for recordings copied off a
running agent:

- gzip files are read with :mod:`gzip`; zstd files with the ``zstandard`` package when
  it is installed (streamed), else with cramjam (a tailhound dependency; the whole file is decompressed in
  memory, and a cut-off zstd frame cannot be read at all: install ``zstandard`` or decompress it with
  ``zstd -dc``); the format is told by the first bytes, whatever the name;
- a last line that does not parse and has no newline (the writer was stopped mid-line), or a compressed
  stream that ends early, is a warning (``warn``), not a failure: everything before it is used;
- :class:`ReadProgress` counts records and compressed bytes read, for a progress line on long runs.

Any other bad line raises :class:`~tailhound.recording.RecordingError` naming the file and line.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import io
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from tailhound.recording import RecordingError, ScrapeRecord, compression_of

Warn = Callable[[str], None]


def _no_warning(_msg: str) -> None:
    pass


@dataclass
class ReadProgress:
    """What has been read so far over all files (for the progress line)."""

    total_bytes: int = 0
    done_bytes: int = 0
    records: int = 0
    files: int = 0
    current: str = ""
    _raw: IO[bytes] | None = field(default=None, repr=False)
    _base: int = 0

    @property
    def position(self) -> int:
        """Compressed bytes read: the finished files plus the current one's position."""
        raw = self._raw
        try:
            here = raw.tell() if raw is not None and not raw.closed else 0
        except (OSError, ValueError):
            here = 0
        return self._base + here

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.position / self.total_bytes) if self.total_bytes else None


def zstd_support() -> str:
    """How .zst files are read here: ``zstandard`` (streamed) or ``cramjam`` (in memory)."""
    try:
        importlib.import_module("zstandard")
        return "zstandard"
    except ImportError:
        return "cramjam"


def _truncation_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [EOFError, gzip.BadGzipFile]
    with contextlib.suppress(ImportError, AttributeError):
        errors.append(importlib.import_module("zstandard").ZstdError)
    return tuple(errors)


class _EndsEarly(io.RawIOBase):
    """A decompressing stream that reports a cut-off end as the end of the data (and remembers it)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.cut: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # a writable buffer
        if self.cut is not None:
            return 0
        try:
            data = self.inner.read(len(buffer))
        except _truncation_errors() as exc:
            self.cut = str(exc) or type(exc).__name__
            return 0
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def _open_text(path: Path) -> tuple[IO[str], IO[bytes], _EndsEarly | None]:
    kind = compression_of(path)
    raw = path.open("rb")
    if kind == "gzip":
        stream = _EndsEarly(gzip.GzipFile(fileobj=raw, mode="rb"))
        return io.TextIOWrapper(io.BufferedReader(stream), encoding="utf-8"), raw, stream
    if kind == "zstd":
        try:
            zstandard = importlib.import_module("zstandard")  # optional: streamed when present
        except ImportError:
            import cramjam

            data = raw.read()
            try:
                plain = bytes(cramjam.zstd.decompress(data))
            except Exception as exc:  # cramjam raises plain errors ("incomplete frame")
                raw.close()
                raise RecordingError(
                    str(path),
                    0,
                    f"cannot decompress zstd ({exc}); a cut-off .zst file needs the "
                    "zstandard package (pip install zstandard) or `zstd -dc`",
                ) from None
            return io.TextIOWrapper(io.BytesIO(plain), encoding="utf-8"), raw, None
        stream = _EndsEarly(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True))
        return io.TextIOWrapper(io.BufferedReader(stream), encoding="utf-8"), raw, stream
    return io.TextIOWrapper(raw, encoding="utf-8"), raw, None


def iter_recording(
    path: str | Path, warn: Warn = _no_warning, progress: ReadProgress | None = None
) -> Iterator[ScrapeRecord]:
    """The records of one recording in file order (see the module docstring for what is tolerated)."""
    p = Path(path)
    try:
        text, raw, stream = _open_text(p)
    except OSError as exc:
        raise RecordingError(str(p), 0, f"cannot open: {exc.strerror}") from None
    if progress is not None:
        progress._raw, progress.current = raw, str(p)
    line_no = 0
    pending: tuple[int, str] | None = None  # the previous line, parsed once the next one is known
    with text, raw:
        for line in _lines(text, p):
            line_no += 1
            if pending is not None:
                rec = _parse(p, *pending, last=False, warn=warn)
                if rec is not None:
                    if progress is not None:
                        progress.records += 1
                    yield rec
            pending = (line_no, line)
        cut = stream.cut if stream is not None else None
        if cut is not None:
            warn(f"{p}: the compressed stream ends early ({cut}): the lines before it are used")
        if pending is not None:
            rec = _parse(p, *pending, last=True, warn=warn, cut=cut is not None)
            if rec is not None:
                if progress is not None:
                    progress.records += 1
                yield rec
    if progress is not None:
        progress._base += p.stat().st_size
        progress._raw = None
        progress.files += 1


def _lines(text: IO[str], path: Path) -> Iterator[str]:
    line_no = 0
    try:
        for line in text:
            line_no += 1
            yield line
    except UnicodeDecodeError as exc:
        raise RecordingError(str(path), line_no + 1, f"not UTF-8 text ({exc.reason})") from None


def _parse(path: Path, line_no: int, line: str, *, last: bool, warn: Warn, cut: bool = False) -> ScrapeRecord | None:
    if not line.strip():
        return None
    try:
        return ScrapeRecord.model_validate_json(line)
    except ValidationError as exc:
        if last and (cut or not line.endswith("\n")):
            warn(f"{path}:{line_no}: the last line is cut off ({len(line)} characters, no newline): ignored")
            return None
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "line"
        raise RecordingError(str(path), line_no, f"{where}: {err['msg']}") from None


def iter_recordings(
    paths: Iterable[str | Path], warn: Warn = _no_warning, progress: ReadProgress | None = None
) -> Iterator[ScrapeRecord]:
    """Every file's records, one file after the other."""
    for p in paths:
        yield from iter_recording(p, warn, progress)


class ProgressLine:
    """Reading progress on stderr for long runs (:class:`tailhound.progress.ProgressReporter`): a rich bar over
    the bytes read on a terminal, a line every 10 s otherwise (CI logs); nothing for runs shorter than
    `after_s` (default: 1 s on a terminal, 10 s otherwise)."""

    def __init__(
        self,
        label: str,
        progress: ReadProgress,
        stream: IO[str] | None = None,
        after_s: float | None = None,
        enabled: bool = True,
    ) -> None:
        from tailhound.progress import ProgressReporter

        self.label, self.progress = label, progress
        self.reporter = ProgressReporter(label, stream=stream, enabled=enabled, after_s=after_s)
        self.tty = self.reporter.tty
        self.t0 = time.monotonic()

    def tick(self, *, show: bool = True) -> None:
        pr, rep = self.progress, self.reporter
        if pr.total_bytes:  # the bar runs over bytes read (compressed), the records are its detail
            rate = pr.records / max(time.monotonic() - self.t0, 1e-9)
            done, total, detail = pr.position, pr.total_bytes, f"{pr.records:,} records ({rate:,.0f}/s)"
        else:
            done, total, detail = pr.records, None, ""
        if show:
            rep.update(done, total, detail)
        else:
            rep.done_n, rep.total, rep.detail = done, total or rep.total, detail

    def done(self) -> None:
        self.tick(show=False)
        self.reporter.close()  # the final state, when anything was shown

    def wrap(self, records: Iterable[ScrapeRecord]) -> Iterator[ScrapeRecord]:
        for rec in records:
            yield rec
            self.tick()
        self.done()
