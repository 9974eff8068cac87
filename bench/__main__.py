"""`make bench`: run every benchmark and print the tables BENCHMARKS.md quotes.

Flags: ``--quick`` (one short repetition, a smoke run), ``--breakdown`` (also each collector group alone),
``--only SECTION[,SECTION]`` (repeatable; sections: parse, agent, streams, replay, memory, notify-lag,
notify-noise, startup, scenarios, table-store, nodes-per-core, scale-out, ingest, fleet-memory, fleet-scale,
state-size, wire, model-forward, peer, offline),
``--streams-n N`` (snapshots measured by the streams throughput section).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform

from bench import agent_cost, parse_speed, replay_speed, streams_memory, streams_throughput

SECTIONS = (
    "parse",
    "agent",
    "streams",
    "replay",
    "memory",
    "notify-lag",
    "notify-noise",
    "startup",
    "scenarios",
    "table-store",
    "nodes-per-core",
    "scale-out",
    "ingest",
    "fleet-memory",
    "fleet-scale",
    "state-size",
    "wire",
    "model-forward",
    "peer",
    "offline",
)


def machine() -> str:
    with open("/proc/cpuinfo") as fh:
        cpu = next(
            (line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), platform.processor()
        )
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one short repetition of everything (a smoke run)")
    p.add_argument("--breakdown", action="store_true", help="agent cost: also each collector group alone")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SECTION",
        help=f"run only these sections ({', '.join(SECTIONS)}); comma-separated or repeated",
    )
    p.add_argument(
        "--streams-n",
        type=int,
        default=None,
        metavar="N",
        help="snapshots measured per streams throughput run (default 4096, --quick 512)",
    )
    args = p.parse_args(argv)
    only = [s.strip() for item in args.only for s in item.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        p.error(f"unknown section(s) {', '.join(unknown)}; sections: {', '.join(SECTIONS)}")
    args.sections = [s for s in SECTIONS if not only or s in only]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quick = args.quick
    print(f"machine: {machine()}\n")
    if "parse" in args.sections:
        print("## Exposition parse speed\n")
        print(parse_speed.report(parse_speed.run(reps=3 if quick else 7)))
    if "agent" in args.sections:
        print("\n## Agent cost (all collectors at 1 Hz)\n")
        medians = asyncio.run(
            agent_cost.run(
                reps=1 if quick else 3,
                warmup_s=5 if quick else 8,
                window_s=10 if quick else 30,
                breakdown=args.breakdown,
            )
        )
        print(agent_cost.report(medians))
    if "streams" in args.sections:
        print("\n## Streams throughput (telemetry topic -> worker)\n")
        n = args.streams_n or (512 if quick else 4096)
        print(streams_throughput.report(asyncio.run(streams_throughput.run(n=n, reps=1 if quick else 3))))
    if "replay" in args.sections:
        print("\n## Offline replay speed\n")
        print(replay_speed.report(replay_speed.run(reps=1 if quick else 3)))
    if "memory" in args.sections:
        print("\n## Streams state memory\n")
        sizes = (1_000, 10_000) if quick else (10_000, 100_000)
        print(streams_memory.report(streams_memory.run(sizes=sizes)))
    if "notify-lag" in args.sections:
        from bench import notifier_lag

        print("\n## Notifier: detection-to-delivery lag\n")
        n = 20 if quick else 200
        print(notifier_lag.report(asyncio.run(notifier_lag.run(n=n, reps=1 if quick else 3))))
    if "notify-noise" in args.sections:
        from bench import notifier_noise

        print("\n## Notifier: noise reduction on the scenario suite\n")
        names = ["thermal-throttle"] if quick else None
        print(notifier_noise.report(notifier_noise.run(names)))
    if "startup" in args.sections:
        from bench import worker_start

        print("\n## Worker start-up\n")
        print(worker_start.report(worker_start.run(reps=2 if quick else 7)))
    if "scenarios" in args.sections:
        from bench import scenarios

        print("\n## Diagnosis on the scenario suite (issue 12)\n")
        print(scenarios.report(scenarios.run(["surge-fleet"] if quick else None)))
    if "table-store" in args.sections:
        from bench import table_store

        print("\n## Table store: throughput, recovery time and memory (issue 16)\n")
        reps, sizes = (1, [0, 1_000]) if quick else (3, [0, 1_000, 10_000])
        thr = asyncio.run(table_store.throughput(512 if quick else 2048, reps))
        print(table_store.report(thr, asyncio.run(table_store.recovery(sizes, reps))))
    if "nodes-per-core" in args.sections:
        from bench import nodes_per_core

        print("\n## Scale out: nodes per worker core (issue 16)\n")
        n = args.streams_n or (512 if quick else 4096)
        for nvml in (False, True):
            print(nodes_per_core.report(asyncio.run(nodes_per_core.run(n=n, reps=1 if quick else 3, nvml=nvml))))
    if "scale-out" in args.sections:
        from bench import scale_out

        print("\n## Scale out: 1, 2 and 3 workers (issue 16)\n")
        print(scale_out.report(asyncio.run(scale_out.run(n=512 if quick else 4096, reps=1 if quick else 3))))
    if "ingest" in args.sections:
        from bench import ingest_speed

        print("\n## Prometheus ingest: remote write and federation vs the agent path (issue 19)\n")
        print(ingest_speed.report(ingest_speed.run(nodes=5 if quick else 20, reps=1 if quick else 5)))
    if "fleet-memory" in args.sections:
        from bench import fleet_memory

        print("\n## Bounded fleet state: memory per node and per model, with and without the caps (issue 28)\n")
        print(
            fleet_memory.report(
                fleet_memory.run(
                    realistic=(200, 1_000), attack=(1_000, 5_000), node_cap=500, model_sizes=(200,), model_cap=50
                )
                if quick
                else fleet_memory.run()
            )
        )
    if "fleet-scale" in args.sections:
        from bench import fleet_scale

        print("\n## Cost per snapshot against fleet size: 10, 1,000 and 10,000 nodes of one model (issue 30)\n")
        sizes = (10, 200, 1_000) if quick else (10, 1_000, 10_000)
        print(fleet_scale.report(fleet_scale.run(sizes, rounds=2 if quick else 3, warm=2 if quick else 3)))
    if "state-size" in args.sections:
        from bench import state_size

        print("\n## A node's state on the table and in memory, 30 minutes and 4 hours (issue 30)\n")
        nodes, rounds = (5, 20) if quick else (100, 120)
        got = state_size.run(nodes, rounds)
        print(
            f"{nodes} nodes x {rounds} rounds: record {got['record_bytes'] / 1024:.1f} KB, RSS growth "
            f"{got['rss_per_node'] / 1024:.0f} KB per node, {got['us_per_snapshot']:.0f} us per snapshot"
        )
        print(state_size.report_slope(state_size.slope((2, 4) if quick else (10, 40), 20 if quick else 960)))
    if "wire" in args.sections:
        from bench import wire_format

        print("\n## Telemetry wire formats: bytes per node per 15 s, encode and decode (issue 30)\n")
        print(wire_format.report(wire_format.run(ticks=16 if quick else 64, reps=1 if quick else 5)))
        print("\n" + wire_format.report_layouts(wire_format.layout_memory(nodes=20 if quick else 200)))
    if "model-forward" in args.sections:
        from bench import model_forward

        print("\n## The model-topic forward: bytes and CPU per forwarded engine snapshot (issue 30)\n")
        print(model_forward.report(model_forward.run(ticks=16 if quick else 64, reps=1 if quick else 3)))
    if "peer" in args.sections:
        from bench import peer

        print("\n## Peer: Prometheus and the worker on the same fleet, nodes per core (issue 30)\n")
        print(
            peer.report(
                asyncio.run(peer.run(nodes=5, rounds=8, interval_s=1.0, warm=2, reps=1) if quick else peer.run())
            )
        )
    if "offline" in args.sections:
        from bench import offline_tools

        print("\n## Offline tools against their targets: rules test, capacity from telemetry\n")
        print(offline_tools.report(offline_tools.run(reps=1 if quick else 3, minutes=60 if quick else 420)))


if __name__ == "__main__":
    main()
