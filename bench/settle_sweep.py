"""Choosing the settle time (issue 12): the scenario suite at several values of
``correlate.CORRELATION_WAIT_S`` (how long a cause waits for a better-ranked pending one before it opens the
incident), scored for first cause right and time to detect.

``python -m bench.settle_sweep [SECONDS ...]`` prints one row per value. The suite and its scoring are
``tests/scenarios/suite.py`` (see bench/scenarios.py); a residual cause (node-degraded) waits for a pending better
cause regardless of this value.
"""

from __future__ import annotations

import statistics
import sys

from bench.scenarios import _suite


def run(values: list[float]) -> list[dict]:
    import tailhound.streams.correlate as correlate

    suite = _suite()
    saved = correlate.CORRELATION_WAIT_S
    rows = []
    try:
        for value in values:
            correlate.CORRELATION_WAIT_S = value
            scores = [suite.score(sc, *suite.replay(sc)) for sc in suite.SCENARIOS.values()]
            agg = suite.aggregate(scores)
            detect = [
                f.detect_min for s in scores for f in s.faults if f.expect is not None and f.detect_min is not None
            ]
            rows.append(
                {
                    "wait_s": value,
                    "first_right": agg.first_right,
                    "incidents": agg.all_incidents,
                    "per_fault": agg.incidents_per_fault,
                    "wrong": agg.wrong,
                    "median_detect_min": statistics.median(detect) if detect else None,
                }
            )
    finally:
        correlate.CORRELATION_WAIT_S = saved
    return rows


def report(rows: list[dict]) -> str:
    lines = [
        "| settle (s) | first cause right | incidents per fault | wrong cause | median time to detect (min) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['wait_s']:g} | {r['first_right']}/{r['incidents']} | {r['per_fault']:.2f} | {r['wrong']} | "
            f"{r['median_detect_min']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run([float(x) for x in sys.argv[1:]] or [0.0, 60.0, 120.0, 180.0])))
