"""The model stage in the worker on its own (no Faust, no broker): forwards in, events out, the forward format."""

from __future__ import annotations

from types import SimpleNamespace

from tailhound.snapshot import CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot
from tailhound.streams import codec, model_forward
from tailhound.streams.intake import MODEL_STAGE_FAILED, IntakeStats
from tailhound.streams.model_forward import CAUSES_HEADER
from tailhound.streams.model_stage import ModelStage, model_keys, split_rules
from tailhound.streams.model_stage_handler import ModelStageHandler, causes
from tailhound.streams.rollup.agent import ProgressMarks
from tailhound.streams.rollup.order import TICK_KEY
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text
from tailhound.wire.decoded import DecodedSnapshot, Gauge, HistDelta, Histogram
from tests.streams.test_model_stage import RULES, T0, engine_snapshot


class Sent:
    """A topic's `send`, recording what it was given."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    async def __call__(self, **kw) -> None:
        self.calls.append(kw)


def _handler(events: list, stage: ModelStage | None = None) -> tuple[ModelStageHandler, dict, IntakeStats]:
    store: dict = {}
    stats = IntakeStats()
    ticks = iter(range(0, 10**6, 10))  # wall time, 10 s a call: past the cold wait after the first

    async def publish(evs: list) -> None:
        events.extend(evs)

    stage = stage or ModelStage(split_rules(RuleSet(rules=parse_rule_text(RULES, "t.yaml")))[1])
    handler = ModelStageHandler(
        model_stage=stage,
        store=store,
        marks=ProgressMarks(Sent(), enabled=False),
        stats=stats,
        stage=publish,
        clock=lambda: T0 + next(ticks),
    )
    return handler, store, stats


def _message(key: bytes, value: bytes, node_causes: bytes = b"") -> SimpleNamespace:
    return SimpleNamespace(
        topic="tailhound.model-telemetry",
        partition=0,
        offset=0,
        key=key,
        value=value,
        headers=[(CAUSES_HEADER, node_causes)],
    )


def _fleet() -> list[Snapshot]:
    return [
        engine_snapshot(n, T0 + 15 * i, slow=i >= 4, waiting=8 if i >= 6 else 1)
        for i in range(12)
        for n in ("n1", "n2")
    ]


async def _run(encode) -> tuple[list, dict]:
    events: list = []
    handler, store, _ = _handler(events)
    for snap in _fleet():
        for key in model_keys(snap):
            await handler.handle(_message(key.encode(), encode(snap)))
    return events, store


async def test_forwards_give_the_same_incidents_and_state_as_the_model_stage_fed_directly():
    direct = ModelStage(split_rules(RuleSet(rules=parse_rule_text(RULES, "t.yaml")))[1])
    expected = [ev.model_dump_json() for snap in _fleet() for ev in direct.feed(snap)]
    events, store = await _run(model_forward.encode)
    assert [ev.model_dump_json() for ev in events] == expected
    assert {e.rule for e in events if e.event == "opened"} == {"model-slow", "fleet-queue"}
    assert store["model:llama"] == direct.store.get("model:llama") and store["fleet"] == direct.store.get("fleet")


async def test_a_forward_of_the_previous_version_whole_json_is_still_read():
    new_events, new_store = await _run(model_forward.encode)
    old_events, old_store = await _run(codec.snapshot_json)
    assert [e.model_dump_json() for e in old_events] == [e.model_dump_json() for e in new_events]
    assert old_store == new_store


def test_a_forward_carries_only_what_the_model_stage_reads():
    labels = {"model_name": "llama"}
    snap = Snapshot(
        ts=T0,
        node="n1",
        source="vllm",
        interval_s=15,
        prev_ts=T0 - 15,
        labels={"instance": "n1"},
        samples=[
            HistogramSample(
                name="h",
                labels=labels,
                le=[0.5, 1.0],
                counts=[900.0, 1000.0],
                count=1000,
                sum=300.5,
                delta=HistogramDelta(counts=[3.0, 4.0], count=4, sum=1.25),
            ),
            HistogramSample(name="first_sight", labels=labels, le=[1.0], counts=[1.0], count=1, sum=1.0),
            CounterSample(name="c", labels=labels, value=1e6, delta=12.5),
            CounterSample(name="c_first_sight", labels=labels, value=5.0),
            GaugeSample(name="g", labels=labels, value=0.75),
        ],
    )
    raw = model_forward.encode(snap)
    assert len(raw) < len(codec.snapshot_json(snap)) / 2
    back = model_forward.decode(raw)
    assert (back.ts, back.node, back.source, back.interval_s, back.labels) == (T0, "n1", "vllm", 15.0, snap.labels)
    by_name = {s.name: s for s in back.samples}
    assert set(by_name) == {"h", "c", "g"}  # first sights left out: no increase to add up
    h = by_name["h"]
    assert (h.le, h.delta.counts, h.delta.count, h.delta.sum) == ([0.5, 1.0], [3.0, 4.0], 4.0, 1.25)
    assert by_name["c"].delta == 12.5 and by_name["g"].value == 0.75 and by_name["g"].kind == "gauge"


def test_what_is_neither_format_decodes_to_nothing():
    assert model_forward.decode(b"") is None
    assert model_forward.decode(b"\x93\x01\x02\x03") is None
    assert model_forward.decode(b'{"not": "a snapshot"}') is None


async def test_a_tick_closes_what_wall_time_allows_and_a_failing_add_is_counted():
    events: list = []
    handler, store, stats = _handler(events)
    handler.clock = lambda: T0  # a fresh aggregator: nothing closes during the cold wait
    for ts in (T0, T0 + 15):
        await handler.handle(_message(b"llama", model_forward.encode(engine_snapshot("n1", ts))))
    assert "aggregator:llama" not in store
    handler.clock = lambda: T0 + 10  # past the cold wait: the tick closes the first bucket
    await handler.handle(_message(TICK_KEY, b""))
    assert "aggregator:llama" in store and stats.rejected[MODEL_STAGE_FAILED] == 0

    def broken(*_a, **_kw):
        raise RuntimeError("a bucket that cannot be judged")

    handler.model_stage.add = broken  # type: ignore[method-assign]
    await handler.handle(_message(b"llama", model_forward.encode(engine_snapshot("n1", T0 + 30))))
    assert stats.rejected[MODEL_STAGE_FAILED] == 1


def test_causes_come_from_the_header_as_pairs_or_a_dict():
    assert causes([(CAUSES_HEADER, b"gpu-thermal,kv-cache")]) == ("gpu-thermal", "kv-cache")
    assert causes({CAUSES_HEADER: "nvlink"}) == ("nvlink",)
    assert causes([]) == () and causes(None) == ()


def test_a_forward_writes_each_label_set_and_bucket_layout_once_whether_shared_or_equal():
    def snapshot(share: bool) -> DecodedSnapshot:
        labels, le = {"engine": "0"}, [0.5, 1.0]
        other = labels if share else dict(labels)
        other_le = le if share else list(le)
        return DecodedSnapshot(
            ts=T0,
            node="n1",
            source="vllm",
            samples=[
                Gauge("g", labels, 2.0),
                Gauge("g2", other, 2.5),
                Histogram("h", labels, le, [1.0, 2.0], 2.0, 1.5, HistDelta([1.0, 2.0], 2.0, 1.5)),
                Histogram("h2", other, other_le, [1.0, 3.0], 3.0, 1.5, HistDelta([0.0, 1.5], 1.5, 0.5)),
            ],
        )

    shared, equal = model_forward.encode(snapshot(True)), model_forward.encode(snapshot(False))
    assert shared == equal
    back = model_forward.decode(shared)
    assert [s.labels for s in back.samples] == [{"engine": "0"}] * 4
    assert [s.delta.counts for s in back.samples if s.kind == "histogram"] == [[1.0, 2.0], [0.0, 1.5]]
