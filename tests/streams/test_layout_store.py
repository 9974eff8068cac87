"""The worker's layouts table (tailhound.streams.layout_store): a worker that restarts or takes a node over reads the
node's values-only parts with the layout its predecessor stored; what the table holds is checked when read back."""

from __future__ import annotations

import base64
import zlib

import msgspec

from tailhound.snapshot import Snapshot
from tailhound.streams.intake import Gate, Rejection
from tailhound.streams.intake_stats import IntakeStats, StatsCollector
from tailhound.streams.layout_store import MAX_PER_NODE, MAX_TABLES_BYTES, MIN_LAYOUTS, StoredLayouts, memory_bound
from tailhound.wire import snapshot_json
from tailhound.wire.v3 import LayoutMemory, Message
from tests.wire.test_v3_layouts import T0, snap


def admit(gate: Gate, raw: bytes, node: str = "gpu-node-1"):
    return gate.admit_all(raw, node.encode(), arrival=T0 + 10_000)


def test_a_restarted_worker_reads_the_references_with_the_stored_layout():
    table: dict = {}
    memory = LayoutMemory(every_s=300)
    raws = [memory.encode(snap(i)) for i in range(1, 5)]
    first = StoredLayouts(table)
    for raw in raws[:2]:
        assert not isinstance(admit(Gate(layouts=first), raw), Rejection)
    assert first.counts["written"] == 1 and set(table) == {"gpu-node-1"}
    # (a new process: nothing in memory, the table recovered from its changelog)
    again = StoredLayouts(table)
    gate = Gate(layouts=again)
    for i, raw in enumerate(raws[2:], start=3):
        [back] = admit(gate, raw)
        assert Snapshot.model_validate_json(snapshot_json(back)) == snap(i)
    assert again.counts["recalled"] == 1 and again.counts["written"] == 0


def test_a_refresh_of_a_known_layout_does_not_write_the_table_again():
    table: dict = {}
    store = StoredLayouts(table)
    memory = LayoutMemory(every_s=30)  # (a refresh every other snapshot)
    for i in range(1, 9):
        assert not isinstance(admit(Gate(layouts=store), memory.encode(snap(i))), Rejection)
    assert store.counts["written"] == 1


def test_without_the_table_a_reference_is_still_a_dead_letter():
    memory = LayoutMemory(every_s=300)
    raws = [memory.encode(snap(i)) for i in range(1, 3)]
    admit(Gate(layouts=StoredLayouts({})), raws[0])
    got = admit(Gate(layouts=StoredLayouts({})), raws[1])
    assert isinstance(got, Rejection) and got.kind == "unknown_layout"


def test_a_stored_record_that_does_not_read_is_no_layout_and_nothing_raises():
    memory = LayoutMemory(every_s=300)
    raws = [memory.encode(snap(i)) for i in range(1, 3)]
    table: dict = {}
    admit(Gate(layouts=StoredLayouts(table)), raws[0])
    [[key, tables]] = table["gpu-node-1"]["layouts"]
    bad_kinds = msgspec.msgpack.decode(zlib.decompress(base64.b64decode(tables)))
    bad_kinds[12] = b"\x07"  # (kinds: a sample kind that does not exist)

    def packed(raw: bytes) -> str:
        return base64.b64encode(zlib.compress(raw)).decode()

    unreadable = 0
    for broken in (
        {"v": 1, "layouts": [[key, "not base64!"]]},
        {"v": 1, "layouts": [[key, base64.b64encode(b"not deflated").decode()]]},
        {"v": 1, "layouts": [[key, packed(b"\xc1 not msgpack")]]},
        {"v": 1, "layouts": [[key, packed(msgspec.msgpack.encode(bad_kinds))]]},
        {"v": 1, "layouts": [[key, packed(b"\x00" * (MAX_TABLES_BYTES + 1))]]},  # (a bomb: inflated past the bound)
        {"v": 1, "layouts": [[key]]},
        {"v": 2, "layouts": [[key, tables]]},
        ["not", "a", "record"],
        "text",
    ):
        store = StoredLayouts({"gpu-node-1": broken})
        got = admit(Gate(layouts=store), raws[1])
        assert isinstance(got, Rejection) and got.kind == "unknown_layout", broken
        unreadable += store.counts["unreadable"]
    assert unreadable == 5  # (the others are not records of a layout at all)


def test_a_node_keeps_its_newest_layouts_and_an_expired_node_none():
    table: dict = {}
    store = StoredLayouts(table)
    for gpus in range(1, MAX_PER_NODE + 4):  # (a new label set each time: a new layout id)
        raw = LayoutMemory(every_s=300).encode(snap(1, gpus=gpus))
        assert not isinstance(admit(Gate(layouts=store), raw), Rejection)
    assert len(table["gpu-node-1"]["layouts"]) == MAX_PER_NODE
    store.forget("gpu-node-1")
    store.forget("never-seen")
    assert table == {}


def test_the_stored_tables_carry_no_values():
    table: dict = {}
    raw = LayoutMemory(every_s=300).encode(snap(7))
    admit(Gate(layouts=StoredLayouts(table)), raw)
    [[_, tables]] = table["gpu-node-1"]["layouts"]
    part = msgspec.msgpack.decode(raw, type=Message).parts[0]
    stored = msgspec.msgpack.decode(zlib.decompress(base64.b64decode(tables)))
    assert stored[15:] == [[], [], [], []] and part.values


def test_memory_holds_the_layouts_of_every_node_the_worker_may_hold():
    # (32,768 layouts were 8,192 nodes of 4 sources: past that, every referenced part missed the cache)
    assert memory_bound(20_000) >= 4 * 20_000 and memory_bound(0) == memory_bound(20_000)
    assert memory_bound(10) == MIN_LAYOUTS


def test_a_message_refused_after_its_decode_leaves_nothing_in_the_table():
    table: dict = {}
    store = StoredLayouts(table)
    raw = LayoutMemory(every_s=300).encode(snap(1))
    got = Gate(layouts=store).admit_all(raw, b"another-node", arrival=T0 + 10_000)
    assert isinstance(got, Rejection) and got.kind == "wrong_key" and table == {}
    assert not isinstance(admit(Gate(layouts=store), raw), Rejection)  # (the same layout, admitted: stored)
    assert store.counts["written"] == 1 and list(table) == ["gpu-node-1"]


def test_the_worker_exports_what_its_layouts_table_did():
    stats, table = IntakeStats(), {}
    memory = LayoutMemory(every_s=300)
    raws = [memory.encode(snap(i)) for i in range(1, 3)]
    admit(Gate(stats=stats, layouts=StoredLayouts(table, counts=stats.layouts)), raws[0])
    admit(Gate(stats=stats, layouts=StoredLayouts(table, counts=stats.layouts)), raws[1])  # (a restart)
    [family] = [f for f in StatsCollector(stats).collect() if f.name == "tailhound_telemetry_layouts"]
    assert {s.labels["event"]: s.value for s in family.samples} == {"written": 1, "recalled": 1, "unreadable": 0}
    assert stats.as_dict()["layouts"] == {"recalled": 1, "written": 1}
