"""Demand = finished + growth of in-flight: a surge raises it, a draining backlog or a slower node does not."""

from __future__ import annotations

import pytest

from tailhound.streams.demand import ARRIVAL_RATE, WINDOW_S, arrival_rates, history_windows

NOW = 10_000.0


def history(running: list[float], waiting: list[float], step: float = 15.0):
    """Points every `step` seconds ending at NOW, per signal."""

    def series(values: list[float]) -> list[tuple[float, float]]:
        return [(NOW - step * (len(values) - 1 - i), v) for i, v in enumerate(values)]

    data = {"engine.requests_running": series(running), "engine.requests_waiting": series(waiting)}
    return lambda signal, _engine: data.get(signal, [])


def view(finished: float, running: float, waiting: float) -> dict:
    return {
        "latency.e2e.window_count": {"0": finished},
        "engine.requests_running": {"0": running},
        "engine.requests_waiting": {"0": waiting},
    }


def test_steady_load_is_finished_per_second():
    steady = history([40.0] * 21, [0.0] * 21)
    assert arrival_rates(view(600, 40, 0), steady, NOW) == {"0": pytest.approx(600 / WINDOW_S)}


def test_a_draining_backlog_is_not_demand():
    # a fault stalled the engine: 30 waiting 5 minutes ago; it caught up, finishing 630 requests
    draining = history([40.0] * 21, [30.0] + [20.0] * 10 + [0.0] * 10)
    assert arrival_rates(view(630, 40, 0), draining, NOW)["0"] == pytest.approx(600 / WINDOW_S)


def test_a_surge_is_demand_even_while_the_engine_cannot_finish_more():
    # arrivals doubled: the engine still finishes 600 (it is full) and 600 more wait
    surge = history([40.0] * 21, [0.0] * 11 + [300.0] * 10)
    assert arrival_rates(view(600, 40, 600), surge, NOW)["0"] == pytest.approx(1200 / WINDOW_S)


def test_no_demand_until_the_history_spans_most_of_the_window():
    short = history([40.0] * 10, [0.0] * 10)  # 135 s of history
    assert arrival_rates(view(600, 40, 0), short, NOW) == {}


def test_history_is_kept_only_when_a_rule_reads_demand():
    assert history_windows({ARRIVAL_RATE, "gpu.util"}) == {
        "engine.requests_running": WINDOW_S * 1.1,
        "engine.requests_waiting": WINDOW_S * 1.1,
    }
    assert history_windows({"gpu.util"}) == {}
