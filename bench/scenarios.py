"""Diagnosis on the real-fleet scenario suite (issue 12): per scenario, right cause and place, time to detect,
incidents per fault, first cause right, wrong causes; then the suite's aggregate against its targets.

Method: every scenario of ``tests/scenarios/suite.py`` (realistic noise; default dcgm-exporter counters,
fleet-wide surge, network path and retry storm, a TGI fleet, two faults on two nodes, a rolling deploy, a
warm GPU, long-prompt head-of-line blocking, healthy fleets and a short blip; 2-4 nodes, 40 minutes, faults
from minute 25) is simulated and replayed by :func:`tailhound.streams.replay.replay_records` with the default
rule pack (node stage and model stage), and scored by ``suite.score``, the function the tests assert with.
Deterministic: the same tree gives the same table.

``python -m bench.scenarios`` (or ``python -m bench --only scenarios``, which also prints the machine line).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _suite():
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:  # the suite lives with the tests (tests/scenarios/suite.py)
        sys.path.insert(0, root)
    from tests.scenarios import suite

    return suite


def run(names: list[str] | None = None) -> dict:
    """Replay and score every scenario (or `names`); returns the scores, the aggregate and the seconds."""
    suite = _suite()
    scores, seconds = [], {}
    for name in names or list(suite.SCENARIOS):
        sc = suite.SCENARIOS[name]
        t0 = time.perf_counter()
        events, start = suite.replay(sc)
        seconds[name] = time.perf_counter() - t0
        scores.append(suite.score(sc, events, start))
    return {"scores": scores, "aggregate": suite.aggregate(scores), "seconds": seconds}


def report(result: dict) -> str:
    suite = _suite()
    scores = result["scores"]
    lines = [suite.table(scores), "", suite.summary(result["aggregate"])]
    gaps = [(s.name, s.problems()) for s in scores if not s.met]
    if gaps:
        lines += ["", "Still wrong:"]
        lines += [f"- {name}: {'; '.join(problems)}" for name, problems in gaps]
    total = sum(result["seconds"].values())
    lines += [
        "",
        f"{len(scores)} scenarios replayed in {total:.1f} s "
        f"(slowest: {max(result['seconds'], key=result['seconds'].get)} "
        f"{max(result['seconds'].values()):.1f} s)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    names = list(argv if argv is not None else sys.argv[1:]) or None
    print(report(run(names)))


if __name__ == "__main__":
    main()
