"""Telemetry wire formats side by side: bytes per node per 15 s after compression, encode and decode per snapshot.

Input: a simulated fleet (:func:`bench.fleet_telemetry.fleet_messages`' simulator: vLLM, dcgm-exporter for
8 GPUs, node_exporter, blackbox per node, collected every 15 s), the snapshots the agent's pipeline builds.
Formats, all from the same snapshots:

- ``v1 JSON``: one JSON message per snapshot (``tailhound.agents.wire.encode_snapshot``), today's default;
- ``v2 bundle``: one JSON message per node and tick (``publish.bundle``);
- ``v3 msgpack``: one version-3 message per snapshot (:mod:`tailhound.wire.v3`), and bundled per node and tick;
- ``v3 as JSON``: the same msgspec structs written as JSON instead of MessagePack (the alternative measured);
- ``v3 layouts referenced``: version 3 with ``publish.layout_every_s`` (:class:`tailhound.wire.v3.LayoutMemory`):
  the node-ticks after each node's first carry values only; its bytes per node per 15 s are the amortized
  ``(full + (k - 1) * values-only) / k`` with ``k = layout_every_s / 15 s`` (:data:`LAYOUT_EVERY_S`, 300 s; and
  :data:`SHORTER_LAYOUT_EVERY_S`, 60 s: the bytes a shorter refresh, a shorter gap after a worker takes a node
  over, costs), and it decodes with the worker's layout cache.

Bytes: one node's tick (its 4 snapshots, which the agent's sender publishes in one request) as the Kafka
record batch aiokafka builds for it (record framing included), compressed as the sender compresses (lz4
at the fast level, :func:`tailhound.agents.sender.use_lz4_level`) and as the simulator/demo publisher used to
(gzip); the median over the ticks measured. Encode: snapshot objects -> bytes; decode: bytes -> the
snapshot objects the step reads (:func:`tailhound.streams.codec.decode_message` for v1/v2, the same entry for v3,
which dispatches on the first bytes); each the median of `reps` passes over all messages, per snapshot, in
process CPU time (the machine is shared: wall time would count other processes' turns).
``python -m bench.wire_format [ticks] [reps]``.
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

import msgspec
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from faust.serializers import codecs

from tailhound.agents.buffer import Message
from tailhound.agents.sender import bundle_batch, use_lz4_level
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.agents.wire import encode_snapshot
from tailhound.snapshot import Snapshot
from tailhound.streams.codec import STATE_CODEC_NAME, decode_message, register
from tailhound.streams.layout_store import StoredLayouts
from tailhound.wire.v3 import WIRE_VERSION, LayoutMemory, encode_message, to_part
from tailhound.wire.v3 import Message as V3Message
from tailhound.wire.v3_decode import LayoutCache, decode_v3

NODES = 8
SOURCES_PER_TICK = 4
TICK_S = 15.0
CODECS = {"lz4": 3, "gzip": 1, "none": 0}
#: the layout refresh of the referenced-layouts row
LAYOUT_EVERY_S = 300.0
#: the shorter refresh of the second referenced-layouts row (bytes only: it decodes as the first)
SHORTER_LAYOUT_EVERY_S = 60.0


def fleet_ticks(ticks: int, nodes: int = NODES) -> list[list[Snapshot]]:
    """`ticks` node-ticks (one node's snapshots of one 15 s tick each), after a warm-up tick (deltas present)."""
    sim = FleetSimulator(SimConfig(nodes=nodes), [FaultSpec.parse("thermal-throttle@10m+10m")])
    builder = SnapshotBuilder()
    snaps = map(builder.build, iter_records(sim, minutes=10**6))
    out: list[list[Snapshot]] = []
    for _key, group in itertools.groupby(snaps, key=lambda s: (s.ts, s.node)):
        out.append(list(group))
        if len(out) >= ticks + nodes:
            break
    return out[nodes:]


def _v3_json(snap: Snapshot) -> bytes:
    return msgspec.json.encode(V3Message(WIRE_VERSION, snap.node, [to_part(snap)]))


ENCODERS: dict[str, Callable[[Snapshot], bytes]] = {
    "v1 JSON": encode_snapshot,
    "v3 msgpack": encode_message,
    "v3 as JSON": _v3_json,
}


def batch_bytes(values: list[tuple[bytes, bytes]], codec: str) -> int:
    """The size of one Kafka record batch of `values` as aiokafka builds it, compressed with `codec`."""
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], 0, -1, -1, -1, 1 << 24)
    for offset, (key, value) in enumerate(values):
        builder.append(offset, timestamp=1_767_225_600_000, key=key, value=value, headers=[])
    return len(builder.build())


def per_item_us(fun: Callable[[], object], count: int, reps: int) -> float:
    runs = []
    for _ in range(reps):
        t0 = time.process_time()
        fun()
        runs.append((time.process_time() - t0) / count * 1e6)
    return statistics.median(runs)


def run(ticks: int = 64, reps: int = 5) -> dict:
    use_lz4_level()
    node_ticks = fleet_ticks(ticks)
    snaps = [s for tick in node_ticks for s in tick]
    rows: dict[str, dict] = {}
    shapes: dict[str, list[list[tuple[bytes, bytes]]]] = {}
    for name, enc in ENCODERS.items():
        per_tick = [[(s.key(), enc(s)) for s in tick] for tick in node_ticks]
        shapes[name] = per_tick
        if name != "v3 as JSON":
            bundled = [[(m.key, m.value) for m in bundle_batch([Message(k, v) for k, v in tick])] for tick in per_tick]
            shapes[name.replace("v1 JSON", "v2 bundle") + (" bundled" if name.startswith("v3") else "")] = bundled
        rows[name] = {"encode_us": per_item_us(lambda enc=enc: [enc(s) for s in snaps], len(snaps), reps)}
    for name, per_tick in shapes.items():
        row = rows.setdefault(name, {})
        flat = [v for tick in per_tick for _k, v in tick]
        row["raw_bytes"] = statistics.median(sum(len(v) for _k, v in tick) for tick in per_tick)
        for codec in ("lz4", "gzip"):
            row[codec] = statistics.median(batch_bytes(tick, codec) for tick in per_tick)
        if not name.startswith("v3 as JSON"):
            row["decode_us"] = per_item_us(lambda flat=flat: [decode_message(v) for v in flat], len(snaps), reps)
    rows["v3 layouts referenced"] = _referenced(node_ticks, rows["v3 msgpack"], reps)
    rows[f"v3 layouts referenced, every {SHORTER_LAYOUT_EVERY_S:.0f} s"] = _referenced(
        node_ticks, rows["v3 msgpack"], 0, SHORTER_LAYOUT_EVERY_S
    )
    return {"ticks": len(node_ticks), "snapshots": len(snaps), "rows": rows}


def _referenced(node_ticks: list[list[Snapshot]], full: dict, reps: int, every_s: float = LAYOUT_EVERY_S) -> dict:
    """The referenced-layouts row: values-only node-ticks measured, amortized with the full ones (`full`) at a
    refresh of `every_s`; encode and decode timed over `reps` passes (0: bytes only)."""
    memory = LayoutMemory(every_s=math.inf)
    per_tick = [[(s.key(), memory.encode(s)) for s in tick] for tick in node_ticks]
    nodes = len({tick[0].node for tick in node_ticks})
    values_only = per_tick[nodes:]  # after each node's first tick
    k = every_s / TICK_S
    row: dict = {}
    if reps:
        row["encode_us"] = per_item_us(
            lambda: [memory.encode(s) for tick in node_ticks for s in tick], sum(map(len, node_ticks)), reps
        )
    sizes = {
        "raw_bytes": lambda tick: sum(len(v) for _k, v in tick),
        "lz4": lambda tick: batch_bytes(tick, "lz4"),
        "gzip": lambda tick: batch_bytes(tick, "gzip"),
    }
    for field, size in sizes.items():
        row[field] = (full[field] + (k - 1) * statistics.median(map(size, values_only))) / k
    flat = [v for tick in per_tick for _k, v in tick]

    def decode_all() -> None:
        cache = LayoutCache()
        for v in flat:
            decode_message(v, layouts=cache)

    if reps:
        row["decode_us"] = per_item_us(decode_all, len(flat), reps)
    return row


def layout_memory(nodes: int = 200) -> dict:
    """What the worker keeps of `nodes` nodes' layouts (one tick each, layouts referenced): memory per node
    (tracemalloc: the layouts in memory and the layouts table's records, as a memory table holds them) and the
    table's record per node on its changelog (the state codec's bytes, written once per new layout)."""
    register()
    memory = LayoutMemory(LAYOUT_EVERY_S)
    messages = [memory.encode(s) for tick in fleet_ticks(nodes, nodes) for s in tick]
    table: dict = {}
    gc.collect()
    tracemalloc.start()
    try:
        store = StoredLayouts(table)
        for raw in messages:
            decode_v3(raw, store)
            store.settle(True)  # (admitted, as the worker's gate does)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    records = [len(codecs.dumps(STATE_CODEC_NAME, record)) for record in table.values()]
    return {
        "nodes": len(table),
        "layouts": len(store),
        "bytes_per_node": held / len(table),
        "record_bytes": statistics.median(records),
    }


def report_layouts(got: dict) -> str:
    return (
        f"layouts kept by the worker, {got['nodes']} nodes ({got['layouts']} layouts): "
        f"{got['bytes_per_node'] / 1024:.1f} KB a node in memory (layouts and table records), "
        f"{got['record_bytes']:,.0f} B a node on the layouts table's changelog (once per new layout)"
    )


def report(result: dict) -> str:
    base = result["rows"]["v1 JSON"]
    lines = [
        f"{result['ticks']} node-ticks ({result['snapshots']} snapshots: vLLM, dcgm 8 GPUs, node, blackbox); "
        "bytes per node per 15 s (median node-tick, one Kafka record batch); us per snapshot (medians)",
        "",
        "| format | raw bytes | lz4 bytes | vs v1 lz4 | gzip bytes | encode us | decode us | decode vs v1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["rows"].items():
        enc = f"{row['encode_us']:.0f}" if "encode_us" in row else "(as above)"
        dec = f"{row['decode_us']:.0f}" if "decode_us" in row else "-"
        ratio = f"{row['decode_us'] / base['decode_us']:.2f}x" if "decode_us" in row else "-"
        lines.append(
            f"| {name} | {row['raw_bytes']:,.0f} | {row['lz4']:,.0f} | {row['lz4'] / base['lz4']:.2f}x | "
            f"{row['gzip']:,.0f} | {enc} | {dec} | {ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(report(run(*args)))
    print()
    print(report_layouts(layout_memory()))
