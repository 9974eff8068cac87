"""Worker start-up: a fresh interpreter to the worker's Faust app built (rules loaded, notifier checked).

Each repetition runs two child processes, interleaved so machine noise hits both alike:

- ``now``: ``tailhound.worker.compose.create_worker_app`` as ``tailhound worker`` builds it (no broker contact);
- ``eager-sklearn``: the same after importing numpy and scikit-learn's QuantileRegressor and metrics, which
  is what every worker paid before load models imported them only to fit (``streams.loadmodel``).

Reported: the median wall time of each, their ratio, and whether numpy / scikit-learn / scipy were loaded.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time
t0 = time.perf_counter()
if {eager}:
    import numpy, sklearn.linear_model, sklearn.metrics  # noqa: F401
from tailhound.settings import Settings
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.worker.compose import create_worker_app
s = Settings(broker="kafka://127.0.0.1:1", streams={{"data_dir": {data_dir!r}}})
create_worker_app(s, load_rules(s.rules_dir))
print(json.dumps({{"s": time.perf_counter() - t0,
                  "loaded": [m for m in ("numpy", "sklearn", "scipy") if m in sys.modules]}}))
"""

VARIANTS = {"now": False, "eager-sklearn": True}


def _once(eager: bool, data_dir: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(eager=eager, data_dir=data_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(reps: int = 7) -> dict[str, dict]:
    samples: dict[str, list[dict]] = {k: [] for k in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            for name, eager in VARIANTS.items():
                samples[name].append(_once(eager, f"{tmp}/{name}/streams"))
    return {
        name: {"median_s": statistics.median(x["s"] for x in runs), "runs": len(runs), "loaded": runs[-1]["loaded"]}
        for name, runs in samples.items()
    }


def report(result: dict[str, dict]) -> str:
    lines = ["| start-up | median (s) | runs | numpy / scikit-learn / scipy loaded |", "|---|---|---|---|"]
    for name, r in result.items():
        lines.append(f"| {name} | {r['median_s']:.3f} | {r['runs']} | {', '.join(r['loaded']) or 'none'} |")
    ratio = result["now"]["median_s"] / result["eager-sklearn"]["median_s"]
    lines.append(f"\nnow / eager-sklearn = {ratio:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(int(sys.argv[1]) if len(sys.argv) > 1 else 7)))
