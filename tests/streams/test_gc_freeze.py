"""The worker's warm-up freeze: at the first threshold and each doubling, only in a worker process."""

from __future__ import annotations

import gc

from tailhound.streams import gc_freeze
from tailhound.streams.gc_freeze import WarmupFreeze


def test_it_freezes_at_the_first_threshold_and_each_doubling_up_to_the_last(monkeypatch):
    monkeypatch.setattr(gc_freeze, "_enabled", True)
    frozen: list[int] = []
    freezer = WarmupFreeze(first=10, last=40)
    monkeypatch.setattr(freezer, "freeze", lambda: frozen.append(freezer.count))
    for _ in range(100):
        freezer.seen()
    assert frozen == [10, 20, 40]
    jumpy = WarmupFreeze(first=10, last=1000)
    monkeypatch.setattr(jumpy, "freeze", lambda: frozen.append(jumpy.count))
    jumpy.seen(35)  # one bundle past two thresholds: one freeze, the next at 40
    assert frozen[-1] == 35 and jumpy.next_at == 40


def test_outside_a_worker_process_it_leaves_the_collector_alone(monkeypatch):
    monkeypatch.setattr(gc_freeze, "_enabled", False)
    freezer = WarmupFreeze(first=1)
    freezer.seen(5)
    assert freezer.freezes == 0


def test_a_freeze_moves_what_is_alive_out_of_the_generations(monkeypatch):
    monkeypatch.setattr(gc_freeze, "_enabled", True)
    before = gc.get_freeze_count()
    try:
        WarmupFreeze(first=1).seen()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_a_worker_that_may_hold_more_nodes_freezes_longer():
    assert gc_freeze.last_freeze_for(0) == gc_freeze.LAST_FREEZE == gc_freeze.last_freeze_for(20_000)
    assert gc_freeze.last_freeze_for(100_000) == 100_000 * gc_freeze.MESSAGES_PER_NODE
