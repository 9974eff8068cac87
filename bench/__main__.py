"""`make bench`: run every benchmark and print the tables BENCHMARKS.md quotes.

Flags: ``--quick`` (one short repetition, a smoke run), ``--breakdown`` (also each collector group alone).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys

from bench import agent_cost, parse_speed


def machine() -> str:
    with open("/proc/cpuinfo") as fh:
        cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")),
                   platform.processor())
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"machine: {machine()}\n")
    print("## Exposition parse speed\n")
    print(parse_speed.report(parse_speed.run(reps=3 if quick else 7)))
    print("\n## Agent cost (all collectors at 1 Hz)\n")
    medians = asyncio.run(agent_cost.run(reps=1 if quick else 3, warmup_s=5 if quick else 8,
                                         window_s=10 if quick else 30, breakdown="--breakdown" in sys.argv))
    print(agent_cost.report(medians))


if __name__ == "__main__":
    main()
