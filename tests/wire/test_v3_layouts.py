"""Layout references (``publish.layout_every_s``): a source's tables go once, then only its values; the worker
reads them back with the layouts it has seen, and a reference it has not seen is a dead letter with a reason."""

from __future__ import annotations

import msgspec

from tailhound.agents.wire import encoder
from tailhound.snapshot import CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot
from tailhound.streams.codec import decode_message
from tailhound.streams.intake import Gate
from tailhound.streams.intake_stats import IntakeStats
from tailhound.wire import Refused, decode_v3, encode_message, snapshot_json
from tailhound.wire.v3 import LayoutMemory, Message
from tailhound.wire.v3_decode import LayoutCache

T0 = 1.7e9


def snap(i: int, node: str = "gpu-node-1", gpus: int = 2) -> Snapshot:
    hist = HistogramSample(
        name="h_seconds",
        labels={"model_name": "m"},
        le=[0.1, 1.0],
        counts=[i, 2.0 * i],
        count=3.0 * i,
        sum=0.5 * i,
        delta=HistogramDelta(counts=[1.0, 2.0], count=3.0, sum=0.5),
    )
    return Snapshot(
        ts=T0 + 15 * i,
        node=node,
        source="vllm",
        interval_s=15.0,
        labels={"engine": "0"},
        samples=[
            *(
                GaugeSample(name="g", labels={"gpu": str(g), "UUID": f"GPU-{g:04d}"}, value=i + g / 10)
                for g in range(gpus)
            ),
            CounterSample(name="c_total", labels={"gpu": "0"}, value=10.0 * i, delta=10.0, reset=i == 3),
            hist,
        ],
    )


def parts_of(raw: bytes):
    return msgspec.msgpack.decode(raw, type=Message).parts


def test_the_layout_goes_once_then_only_values_and_reads_back_equal():
    memory, cache = LayoutMemory(every_s=300), LayoutCache()
    raws = [memory.encode(snap(i)) for i in range(1, 6)]
    assert [p.ref for r in raws for p in parts_of(r)] == [False, True, True, True, True]
    assert all(len(r) < len(raws[0]) for r in raws[1:])
    for i, raw in enumerate(raws, start=1):
        [back] = decode_v3(raw, cache)
        assert Snapshot.model_validate_json(snapshot_json(back)) == snap(i)
    assert len(cache) == 1


def test_the_layout_goes_again_after_every_s_when_it_changes_and_when_time_goes_back():
    memory = LayoutMemory(every_s=60)
    refs = [parts_of(memory.encode(snap(i)))[0].ref for i in range(1, 11)]  # 15 s apart: full every 4th
    assert refs == [False, True, True, True, False, True, True, True, False, True]
    assert not parts_of(memory.encode(snap(11, gpus=3)))[0].ref  # a new GPU: a new layout
    assert not parts_of(memory.encode(snap(2)))[0].ref  # back in time (a replayed file): in full


def test_nodes_have_their_own_layouts():
    memory, cache = LayoutMemory(every_s=300), LayoutCache()
    decode_v3(memory.encode(snap(1, node="a")), cache)
    ref_b = memory.encode(snap(1, node="b"))
    assert not parts_of(ref_b)[0].ref  # the same tables on another node go in full for that node
    # a reference of node a's layout sent as node b's is not read with a's tables
    part = parts_of(memory.encode(snap(2, node="a")))[0]
    forged = msgspec.msgpack.encode(Message(3, "c", [part]))
    out = decode_v3(forged, cache)
    assert isinstance(out, Refused) and out.kind == "unknown_layout"


def test_a_worker_without_the_layout_dead_letters_the_reference_until_it_comes_again():
    memory = LayoutMemory(every_s=60)
    raws = [memory.encode(snap(i)) for i in range(1, 7)]
    stats = IntakeStats()
    fresh = Gate(stats=stats)  # took over the partition after the first message
    got = [fresh.admit_all(raw, b"gpu-node-1", arrival=T0 + 15 * i) for i, raw in enumerate(raws[1:], start=2)]
    assert [getattr(g, "kind", "ok") for g in got] == ["unknown_layout"] * 3 + ["ok", "ok"]
    assert "publish.layout_every_s" in got[0].reason
    assert stats.rejected == {"unknown_layout": 3}
    assert Snapshot.model_validate_json(snapshot_json(got[-1][0])) == snap(6)


def test_a_reference_without_a_cache_is_refused_and_a_full_part_needs_none():
    memory = LayoutMemory(every_s=300)
    full, ref = memory.encode(snap(1)), memory.encode(snap(2))
    assert isinstance(decode_message(full), list)
    out = decode_message(ref)
    assert out.kind == "unknown_layout" and out.stage == "validate"


def test_the_cache_is_bounded_and_keeps_the_most_recently_used():
    cache, memory = LayoutCache(max_layouts=2), LayoutMemory(every_s=300)
    raws = {n: [memory.encode(snap(i, node=n)) for i in (1, 2)] for n in ("a", "b", "c")}
    for n in ("a", "b"):
        decode_v3(raws[n][0], cache)
    decode_v3(raws["a"][1], cache)  # a used: b is the least recently used
    decode_v3(raws["c"][0], cache)
    assert len(cache) == 2
    assert isinstance(decode_v3(raws["b"][1], cache), Refused)
    assert not isinstance(decode_v3(raws["a"][1], cache), Refused)


def test_the_encoder_of_version_3_with_layouts_is_a_layout_memory():
    enc = encoder(3, layout_every_s=120)
    first, second = enc(snap(1)), enc(snap(2))
    assert not parts_of(first)[0].ref and parts_of(second)[0].ref
    assert encoder(3)(snap(1)) == encode_message(snap(1))


def test_cached_layouts_share_their_names_and_bounds_between_nodes():
    # (a worker keeps a layout per node and source: ~20 KB a node, ~11 KB with one object per name and bound list)
    memory, cache = LayoutMemory(every_s=300), LayoutCache()
    for node in ("gpu-node-1", "gpu-node-2"):
        decode_v3(memory.encode(snap(1, node=node)), cache)
    a, b = (next(v for (n, _), v in cache._layouts.items() if n == node) for node in ("gpu-node-1", "gpu-node-2"))
    assert a.names == b.names and all(x is y for x, y in zip(a.names, b.names, strict=True))
    assert a.layouts == b.layouts and a.layouts[0] is b.layouts[0]
    assert a.sample_labels[0] == b.sample_labels[0] and a.sample_labels[0] is not b.sample_labels[0]
