"""The node stage on its own (no Faust, no broker): what one telemetry message does."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tailhound.streams import codec
from tailhound.streams.intake import DeadLetters, Gate, NodeExpiry, TimeBounds
from tailhound.streams.intake_stats import IntakeStats
from tailhound.streams.model_stage import ModelStage, split_rules
from tailhound.streams.node_stage import NodeStage
from tailhound.streams.processor import SnapshotProcessor
from tailhound.streams.rollup.agent import ProgressMarks
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot


class Sent:
    """A topic's `send`, recording what it was given."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    async def __call__(self, **kw) -> None:
        self.calls.append(kw)


def _stage(stats: IntakeStats, letters: Sent, events: list) -> tuple[NodeStage, dict]:
    node_rules, model_rules = split_rules(load_rules(Path(__file__).resolve().parents[2] / "rules"))
    state: dict = {}

    async def stage(evs: list) -> None:
        events.extend(evs)

    bounds = TimeBounds(300.0, 3600.0)
    return NodeStage(
        processor=SnapshotProcessor(node_rules),
        state=state,
        gate=Gate(bounds, 1_000_000, stats),
        bounds=bounds,
        letters=DeadLetters(letters, stats),
        stats=stats,
        expiry=NodeExpiry(None),
        marks=ProgressMarks(Sent(), enabled=False),
        model_stage=ModelStage(model_rules),
        forward=Sent(),
        stage=stage,
        partition_of=lambda node: 0,
        max_nodes=0,
    ), state


def _message(value: bytes, key: bytes = b"gpu-node-1", offset: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        topic="tailhound.telemetry", partition=0, offset=offset, key=key, value=value, timestamp=None, headers=[]
    )


async def test_a_snapshot_is_stepped_and_its_state_stored():
    import time

    stats, letters, events = IntakeStats(), Sent(), []
    stage, state = _stage(stats, letters, events)
    await stage.handle(_message(codec.snapshot_json(dcgm_snapshot(time.time()))))
    assert stats.accepted == 1 and "gpu-node-1" in state and letters.calls == []


async def test_a_message_that_does_not_decode_is_a_dead_letter_and_the_stage_goes_on():
    import time

    stats, letters, events = IntakeStats(), Sent(), []
    stage, state = _stage(stats, letters, events)
    await stage.handle(_message(b"{not json", offset=1))
    assert len(letters.calls) == 1 and state == {}
    await stage.handle(_message(codec.snapshot_json(dcgm_snapshot(time.time())), offset=2))
    assert stats.accepted == 1 and "gpu-node-1" in state


async def test_a_redelivered_snapshot_is_counted_not_stepped_twice():
    import time

    stats, letters, events = IntakeStats(), Sent(), []
    stage, _state = _stage(stats, letters, events)
    body = codec.snapshot_json(dcgm_snapshot(time.time()))
    await stage.handle(_message(body, offset=3))
    await stage.handle(_message(body, offset=3))
    assert (stats.accepted, stats.redelivered) == (1, 1)
