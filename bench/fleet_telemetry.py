"""The streams benchmarks' input: a simulated fleet's telemetry messages, produced to a broker.

A fleet of ``NODES`` nodes (vLLM + dcgm-exporter + node_exporter + blackbox, one thermal-throttle fault) turned into
snapshots by the agent's own ``SnapshotBuilder`` and encoded as the agent's sender does (key = node, JSON), so
every benchmark that reads the telemetry topic reads what an agent would have sent.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.kafka import make_producer
from tailhound.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
NODES = 8
FAULTS = ("thermal-throttle@10m+10m",)  # the first node, GPUs 3 and 5


def fleet_messages(count: int, nodes: int = NODES, nvml: bool = False) -> list[tuple[bytes, bytes]]:
    """`count` (key, value) telemetry messages of a simulated fleet, tick by tick, as the agent sends them,
    one snapshot each. With `nvml`, every node also runs the NVML collector at 1 s (an 8-GPU H200's records,
    :data:`NVML_RECORDING`, replayed in a loop as each node's): 15 NVML snapshots per 15 s tick."""
    sim = FleetSimulator(SimConfig(nodes=nodes), [FaultSpec.parse(f) for f in FAULTS])
    builder = SnapshotBuilder()
    records = iter_records(sim, minutes=10**6)
    if nvml:
        records = with_nvml(records)
    records = itertools.islice(records, count)
    return [(s.key(), s.model_dump_json(exclude_none=True).encode()) for s in map(builder.build, records)]


#: a real 8-GPU H200's NVML collections at 1 s (the agent's own collector, recorded)
NVML_RECORDING = ROOT / "tests" / "agents" / "fixtures" / "h200_nvml_recording.jsonl"


def with_nvml(records):  # an iterator of ScrapeRecord in, the same out
    """`records` (a fleet's, tick by tick) with each node's NVML collections at 1 s added: at each tick's
    second 0 after the node's other sources (what one tick of the agent publishes), then one a second."""
    from tailhound.recording import ScrapeRecord

    bodies = [ScrapeRecord.model_validate_json(line).body for line in NVML_RECORDING.read_text().splitlines()]
    turn = itertools.count()
    tick: list = []
    for rec in itertools.chain(records, [None]):
        if tick and (rec is None or rec.ts != tick[0].ts):
            t0, nodes = tick[0].ts, list(dict.fromkeys(r.node for r in tick))
            for second in range(15):
                for node in nodes:
                    if second == 0:
                        yield from (r for r in tick if r.node == node)
                    yield ScrapeRecord(
                        ts=t0 + second, node=node, job="nvml", interval_s=1.0, body=bodies[next(turn) % len(bodies)]
                    )
            tick = []
        if rec is not None:
            tick.append(rec)


def bundled(messages: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`messages` as an agent with ``publish.bundle`` sends them: each run of one node's snapshots as one
    bundle message (telemetry version 2, :func:`tailhound.agents.sender.bundle_batch`)."""
    from tailhound.agents.buffer import Message
    from tailhound.agents.sender import bundle_batch

    return [(m.key, m.value) for m in bundle_batch([Message(key=k, value=v) for k, v in messages])]


def snapshots_in(value: bytes) -> int:
    """Snapshots in one telemetry message (a bundle's parts; bench messages only: a byte count, no decode)."""
    return value.count(b'{"schema_version":1,') if value.startswith(b'{"schema_version":2,') else 1


async def produce(settings: Settings, messages: list[tuple[bytes, bytes]]) -> None:
    producer = make_producer(settings, compression_type="lz4")
    await producer.start()
    try:
        futures = [await producer.send(settings.telemetry_topic, key=k, value=v) for k, v in messages]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
