"""Progress of long commands (replay, rules backtest, simulate, loadtest) on stderr: a rich progress bar on a
terminal, a plain line every `every_s` seconds otherwise (CI logs, ``2> file``), nothing for short runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

#: seconds between two plain progress lines when stderr is not a terminal
PLAIN_EVERY_S = 10.0


class ProgressReporter:
    """`update(done, total)` as often as wanted: redrawn at most 10 times a second on a terminal, a line every
    `every_s` otherwise; nothing before `after_s` (1 s on a terminal, `every_s` otherwise) or when disabled."""

    def __init__(
        self,
        label: str,
        *,
        unit: str = "records",
        total: float | None = None,
        stream: IO[str] | None = None,
        enabled: bool = True,
        after_s: float | None = None,
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        tty: bool | None = None,
    ) -> None:
        self.label, self.unit, self.total = label, unit, total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.enabled = enabled
        self.every_s = 0.1 if self.tty else every_s
        self.after_s = after_s if after_s is not None else (1.0 if self.tty else every_s)
        self.clock = clock
        self.t0 = clock()
        self.done_n: float = 0
        self.detail = ""
        self._last = float("-inf")
        self._bar: Progress | None = None
        self._task = None
        self.shown = False

    def update(self, done: float, total: float | None = None, detail: str = "") -> None:
        self.done_n, self.detail = done, detail
        if total is not None:
            self.total = total
        if not self.enabled:
            return
        now = self.clock()
        if now - self.t0 < self.after_s or now - self._last < self.every_s:
            return
        self._last = now
        self._show(now)

    def _show(self, now: float) -> None:
        self.shown = True
        if self.tty:
            if self._bar is None:
                self._bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    TaskProgressColumn(),
                    TextColumn("{task.fields[detail]}"),
                    TimeElapsedColumn(),
                    TimeRemainingColumn(),
                    console=Console(file=self.stream, force_terminal=True),
                    transient=False,
                )
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=self.total, detail="")
            self._bar.update(self._task, completed=self.done_n, total=self.total, detail=self._detail(now))
            return
        pct = f"{min(self.done_n / self.total, 1.0) * 100:5.1f}% " if self.total else ""
        self.stream.write(f"{self.label}: {pct}{self._detail(now)}, {now - self.t0:.0f} s\n")
        self.stream.flush()

    def _detail(self, now: float) -> str:
        if self.detail:
            return self.detail
        rate = self.done_n / max(now - self.t0, 1e-9)
        return f"{self.done_n:,.0f} {self.unit} ({rate:,.0f}/s)"

    def close(self) -> None:
        """The last state (when anything was shown), and the bar ended."""
        if self.enabled and self.shown:
            self._show(self.clock())
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class TickProgress:
    """A simulator (anything with ``run(duration_s)`` yielding ticks) whose ticks are counted on `reporter`."""

    def __init__(self, sim: Any, reporter: ProgressReporter) -> None:
        self.sim, self.reporter = sim, reporter
        self.config = sim.config

    def run(self, duration_s: float) -> Iterator[Any]:
        for i, tick in enumerate(self.sim.run(duration_s), 1):
            yield tick
            self.reporter.update(i)
