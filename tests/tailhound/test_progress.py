"""Progress on stderr: a rich bar on a terminal, a plain line every 10 s otherwise, nothing for short runs."""

from __future__ import annotations

import io

from tailhound.progress import ProgressReporter, TickProgress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_piped_progress_is_a_plain_line_every_ten_seconds_and_none_for_a_short_run():
    clock, out = Clock(), io.StringIO()
    rep = ProgressReporter("replay", total=1000, stream=out, clock=clock)
    for i in range(1, 1001):  # 1000 records over 35 s
        clock.now = i * 0.035
        rep.update(i)
    rep.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4  # at 10, 20 and 30 s, then the final state
    assert lines[0].startswith("replay:  28.6% 286 records (29/s), 10 s")
    assert lines[-1].startswith("replay: 100.0% 1,000 records")
    short = io.StringIO()
    quick = ProgressReporter("replay", total=10, stream=short, clock=clock)
    quick.update(10)
    quick.close()
    assert short.getvalue() == ""


def test_a_terminal_gets_a_rich_bar():
    clock, out = Clock(), io.StringIO()
    rep = ProgressReporter("rules backtest", total=200, stream=out, clock=clock, tty=True)
    for i in range(1, 201):
        clock.now = i * 0.05
        rep.update(i, detail=f"{i} records")
    rep.close()
    text = out.getvalue()
    assert "rules backtest" in text and "100%" in text and "200 records" in text and "\x1b[" in text


def test_disabled_progress_writes_nothing():
    clock, out = Clock(), io.StringIO()
    rep = ProgressReporter("simulate", stream=out, clock=clock, enabled=False, after_s=0)
    clock.now = 100
    rep.update(5)
    rep.close()
    assert out.getvalue() == ""


def test_simulator_ticks_are_counted_as_they_are_made():
    class Sim:
        config = object()

        def run(self, duration_s: float):
            yield from range(int(duration_s))

    clock, out = Clock(), io.StringIO()
    rep = ProgressReporter("simulate", unit="ticks", total=30, stream=out, clock=clock, after_s=0, every_s=0)
    ticks = TickProgress(Sim(), rep)
    seen = []
    for t in ticks.run(30):
        seen.append(t)
        clock.now += 1
    assert seen == list(range(30)) and rep.done_n == 30
    assert out.getvalue().splitlines()[-1].startswith("simulate: 100.0% 30 ticks")
