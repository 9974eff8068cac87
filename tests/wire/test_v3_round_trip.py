"""Version 3 carries exactly what version 1 carries: every simulated source round-trips, and the worker's
step gives the same events and states from the decoded structs as from the pydantic snapshots."""

from __future__ import annotations

import itertools
import math
from functools import cache
from pathlib import Path

from tailhound.agents.buffer import Message
from tailhound.agents.sender import bundle_batch
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.snapshot import CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot
from tailhound.streams.codec import decode_message, part_bytes
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.wire import DecodedSnapshot, decode_v3, encode_message, encode_snapshots, is_v3, snapshot_json

RULES = Path(__file__).resolve().parents[2] / "rules"


@cache
def fleet(count: int = 480) -> tuple[Snapshot, ...]:
    """A 2-node fleet's snapshots (vLLM, dcgm, node, blackbox) with GPU 3 of the first node overheating."""
    sim = FleetSimulator(SimConfig(nodes=2), [FaultSpec.parse("thermal-throttle@5m+10m")])
    builder = SnapshotBuilder()
    return tuple(builder.build(r) for r in itertools.islice(iter_records(sim, minutes=10**6), count))


def test_every_simulated_snapshot_reads_back_equal():
    for snap in fleet():
        raw = encode_message(snap)
        assert is_v3(raw)
        [back] = decode_v3(raw)
        assert isinstance(back, DecodedSnapshot)
        assert Snapshot.model_validate_json(snapshot_json(back)) == snap
        assert encode_message(back) == raw  # the decoded struct encodes as the snapshot did


def test_odd_values_read_back_as_the_same_floats():
    hist = HistogramSample(
        name="h",
        labels={"a": "1"},
        le=[0.5, 1.0],
        counts=[0.5, 2.0],
        count=2.5,
        sum=-0.0,
        delta=HistogramDelta(counts=[0.0, 3.0], count=3.0, sum=1e-300),
        reset=True,
    )
    snap = Snapshot(
        ts=1.7e9 + 0.125,
        node="n-1",
        source="vllm",
        interval_s=0.5,
        labels={"model_name": "m"},
        prev_ts=1.7e9,
        gap=True,
        samples=[
            GaugeSample(name="g", value=-0.0),
            GaugeSample(name="big", value=2.0**60 + 0.0),
            CounterSample(name="c", labels={"a": "1"}, value=9007199254740993.0, delta=None, reset=True),
            CounterSample(name="c2", value=1.5, delta=0.0),
            hist,
        ],
    )
    [back] = decode_v3(encode_message(snap))
    again = Snapshot.model_validate_json(snapshot_json(back))
    assert again == snap
    assert math.copysign(1.0, again.samples[0].value) < 0 and math.copysign(1.0, again.samples[4].sum) < 0
    assert [s.kind for s in back.samples] == ["gauge", "gauge", "counter", "counter", "histogram"]


def test_an_error_snapshot_and_one_without_samples_read_back():
    for snap in (
        Snapshot(ts=1.7e9, node="n", source="dcgm", error="connect refused", gap=True),
        Snapshot(ts=1.7e9, node="n", source="node"),
    ):
        [back] = decode_v3(encode_message(snap))
        assert Snapshot.model_validate_json(snapshot_json(back)) == snap


def test_bundled_v3_messages_keep_every_part_in_order():
    snaps = [s for s in fleet()[:16] if s.node == fleet()[0].node]
    batch = [Message(key=s.key(), value=encode_message(s)) for s in snaps]
    [bundle] = bundle_batch(batch)
    assert is_v3(bundle.value) and bundle.key == snaps[0].key()
    parts = decode_message(bundle.value)
    assert parts.bundled and [Snapshot.model_validate_json(snapshot_json(p)) for p in parts] == snaps
    assert bundle.value == encode_snapshots(snaps[0].node, snaps)
    # what the worker forwards to the model stage is each part alone, as version 1
    assert Snapshot.model_validate_json(part_bytes(bundle.value, parts, parts[0])) == snaps[0]


def _run(snapshots) -> tuple[list, dict]:
    processor = SnapshotProcessor(load_rules(RULES))
    store = MemoryStateStore()
    events = []
    for snap in snapshots:
        result = processor.step(store.get(snap.node), snap)
        if result.changed:
            store[snap.node] = result.state
        events.extend(ev.model_dump(mode="json") for ev in result.events)
    return events, dict(store.items())


def test_the_step_gives_the_same_events_and_states_from_version_3():
    snaps = fleet()
    decoded = [p for s in snaps for p in decode_message(encode_message(s))]
    assert all(isinstance(p, DecodedSnapshot) for p in decoded)
    events_v1, states_v1 = _run(snaps)
    events_v3, states_v3 = _run(decoded)
    assert any(ev["root_cause"] == "gpu-thermal-throttle" for ev in events_v1)
    assert events_v3 == events_v1
    assert states_v3 == states_v1
