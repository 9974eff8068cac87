"""The node stage's forward to the model stage: bytes and CPU per forwarded engine snapshot, whole JSON vs compact.

Input: the vLLM snapshots of a simulated fleet (:func:`bench.wire_format.fleet_ticks`: the agent's pipeline over
the simulator, deltas present), as the node stage holds them: :class:`tailhound.snapshot.Snapshot` when the
telemetry came as version 1, a :class:`tailhound.wire.DecodedSnapshot` when it came as version 3.

- ``whole JSON``: the forward as a worker of the previous version sends it: the telemetry message's own bytes for
  version 1 (no encode), the snapshot written as version-1 JSON for version 3; read with
  :func:`tailhound.streams.codec.decode_snapshot` (pydantic);
- ``compact``: :func:`tailhound.streams.model_forward.encode` / :func:`~tailhound.streams.model_forward.decode`.

Bytes: the median forward, raw and as a one-record Kafka batch compressed with lz4 (what the broker stores).
CPU: process time per forward, the median of `reps` passes over all of them (the machine is shared).
``python -m bench.model_forward [ticks] [reps]``.
"""

from __future__ import annotations

import statistics
import sys

from bench.wire_format import batch_bytes, fleet_ticks
from bench.wire_format import per_item_us as _us
from tailhound.agents.sender import use_lz4_level
from tailhound.agents.wire import encode_snapshot
from tailhound.streams import codec, model_forward
from tailhound.wire.v3 import encode_message


def run(ticks: int = 64, reps: int = 3) -> dict:
    use_lz4_level()
    snaps = [s for tick in fleet_ticks(ticks) for s in tick if s.source == "vllm"]
    structs = [p for s in snaps for p in codec.decode_message(encode_message(s))]
    n = len(snaps)
    old = [encode_snapshot(s) for s in snaps]
    new = [model_forward.encode(s) for s in snaps]
    assert [model_forward.encode(s) for s in structs] == new  # either input gives the same forward

    def sizes(values: list[bytes]) -> tuple[float, float]:
        raw = statistics.median(len(v) for v in values)
        lz4 = statistics.median(batch_bytes([(b"llama", v)], "lz4") for v in values)
        return raw, lz4

    rows = {
        "whole JSON": {
            "bytes": sizes(old),
            "encode v1": 0.0,
            "encode v3": _us(lambda: [codec.snapshot_json(s) for s in structs], n, reps),
            "decode": _us(lambda: [codec.decode_snapshot(v, max_bytes=None) for v in old], n, reps),
        },
        "compact": {
            "bytes": sizes(new),
            "encode v1": _us(lambda: [model_forward.encode(s) for s in snaps], n, reps),
            "encode v3": _us(lambda: [model_forward.encode(s) for s in structs], n, reps),
            "decode": _us(lambda: [model_forward.decode(v) for v in new], n, reps),
        },
    }
    return {"forwards": n, "samples": statistics.median(len(s.samples) for s in snaps), "rows": rows}


def report(result: dict) -> str:
    lines = [
        f"{result['forwards']} vLLM forwards, median {result['samples']:.0f} samples each",
        "",
        "| forward | bytes | bytes (lz4 batch) | encode, v1 in | encode, v3 in | decode "
        "| CPU per forward, v1 / v3 in |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in result["rows"].items():
        raw, lz4 = r["bytes"]
        v1, v3 = r["encode v1"] + r["decode"], r["encode v3"] + r["decode"]
        lines.append(
            f"| {name} | {raw:,.0f} | {lz4:,.0f} | {r['encode v1']:.1f} us | {r['encode v3']:.1f} us "
            f"| {r['decode']:.1f} us | {v1:.1f} / {v3:.1f} us |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(report(run(*args)))
