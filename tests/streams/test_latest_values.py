"""LatestValues against the plain model it compacts: one (value, ts, max_age) per signal and entity."""

from __future__ import annotations

import random

from tailhound.streams.latest_values import DEFAULT_AGE_S, MIN_AGE_S, STALE_INTERVALS, LatestValues


class PlainLatest:
    """signal -> entity -> (value, ts, max_age), updated value by value (what LatestValues must answer)."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, tuple[float, float, float]]] = {}

    def update(self, values: dict[str, dict[str, float]], ts: float, interval_s: float | None) -> None:
        max_age = max(STALE_INTERVALS * interval_s, MIN_AGE_S) if interval_s else DEFAULT_AGE_S
        for signal, per_entity in values.items():
            slot = self.values.setdefault(signal, {})
            for entity, value in per_entity.items():
                if entity not in slot or slot[entity][1] <= ts:
                    slot[entity] = (value, ts, max_age)

    def current(self, now: float) -> dict[str, dict[str, float]]:
        out = {}
        for signal, slot in self.values.items():
            current = {e: v for e, (v, ts, age) in slot.items() if now - ts <= age}
            if current:
                out[signal] = current
        return out

    def forget_older_than(self, cutoff: float) -> None:
        for signal in list(self.values):
            kept = {e: t for e, t in self.values[signal].items() if t[1] >= cutoff}
            if kept:
                self.values[signal] = kept
            else:
                del self.values[signal]


def test_latest_values_answer_as_the_plain_model_on_random_updates():
    rng = random.Random(5)
    for _ in range(60):
        latest, plain = LatestValues(), PlainLatest()
        ts = 1_767_225_600.0
        for _ in range(120):
            ts += rng.choice([0.0, 5.0, 15.0, 40.0])
            at = ts - rng.choice([0.0, 0.0, 0.0, 30.0, 200.0])  # some snapshots arrive late
            values = {
                signal: {e: rng.random() for e in rng.sample(["0", "1", "2", "3"], rng.randint(0, 4))}
                for signal in rng.sample(["gpu.util", "gpu.temp", "engine.queue"], rng.randint(1, 3))
            }
            interval = rng.choice([None, 15.0, 60.0])
            latest.update(values, at, interval)
            plain.update(values, at, interval)
            if rng.random() < 0.05:
                latest.forget_older_than(ts - 100)
                plain.forget_older_than(ts - 100)
            now = ts + rng.choice([0.0, 50.0, 130.0])
            assert {s: v for s, v in latest.view(now).items() if s in plain.values} == plain.current(now)
            for signal in ("gpu.util", "gpu.temp", "engine.queue"):
                assert latest.current_of(signal, now) == plain.current(now).get(signal)
                seen = {e: t[1] for e, t in plain.values[signal].items()} if signal in plain.values else None
                assert latest.seen().get(signal) == seen
            assert latest.last_seen() == {s: {e: t[1] for e, t in slot.items()} for s, slot in plain.values.items()}
            assert len(latest) == sum(map(len, plain.values.values()))


def _plain_seen(plain: PlainLatest) -> dict[str, dict[str, float]]:
    return {s: {e: t[1] for e, t in slot.items()} for s, slot in plain.values.items()}


def test_every_read_answers_as_the_plain_model_on_random_updates():
    rng = random.Random(11)
    gpus = [str(i) for i in range(8)]
    signals = ["gpu.util", "gpu.temp", "engine.queue", "node.load"]
    for _ in range(300):
        latest, plain = LatestValues(), PlainLatest()
        ts = 1_767_225_600.0
        for _ in range(rng.randint(5, 60)):
            ts += rng.choice([0.0, 5.0, 15.0, 40.0])
            at = ts - rng.choice([0.0, 0.0, 0.0, 30.0, 200.0])  # some snapshots arrive late
            entities = rng.choice([gpus, ["node"], gpus[:4]])
            values = {
                signal: {
                    e: rng.choice([rng.random(), float("inf"), -0.0, 1e300])
                    for e in rng.sample(
                        entities, rng.choice([len(entities), len(entities), rng.randint(0, len(entities))])
                    )
                }
                for signal in rng.sample(signals, rng.randint(1, len(signals)))
            }
            interval = rng.choice([None, 0.0, 5.0, 15.0, 60.0])
            latest.update(values, at, interval)
            plain.update(values, at, interval)
            if rng.random() < 0.1:
                cutoff = ts - rng.choice([0.0, 60.0, 100.0])
                latest.forget_older_than(cutoff)
                plain.forget_older_than(cutoff)
            now = ts + rng.choice([0.0, 50.0, 130.0])
            current = plain.current(now)
            assert {s: v for s, v in latest.view(now).items() if s in plain.values} == current
            assert {s: latest.current_of(s, now) for s in signals} == {s: current.get(s) for s in signals}
            read = latest.current(now)
            assert {s: read.get(s) for s in signals} == {s: current.get(s) for s in signals}
            assert latest.last_seen() == _plain_seen(plain)
            seen = latest.seen()
            assert {s: seen.get(s) for s in signals} == {s: _plain_seen(plain).get(s) for s in signals}
            assert len(latest) == sum(len(slot) for slot in plain.values.values())
