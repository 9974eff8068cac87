"""A series' short history: the points it keeps, its stored form and what a stored record may hold."""

from __future__ import annotations

import json
import random

import pytest
from pydantic import ValidationError

from tailhound.streams.node_state import NodeState
from tailhound.streams.series_history import SeriesHistory


def _trimmed_as_lists(pts: list[list[float]], cutoff: float, max_points: int) -> None:
    """The list-of-pairs trimming the history replaced (the reference)."""
    while pts and (pts[0][0] < cutoff or len(pts) > max_points):
        pts.pop(0)


def test_appending_and_trimming_keep_the_points_lists_of_pairs_kept_on_random_series():
    rng = random.Random(7)
    for _ in range(300):
        history, reference = SeriesHistory(), []
        for _ in range(rng.randrange(1, 60)):
            ts, value = rng.uniform(0, 1000), rng.choice([0.0, -0.0, 1e300, rng.gauss(0, 5)])
            window, max_points = rng.choice([30.0, 120.0, 600.0]), rng.randrange(1, 20)
            history.append(ts, value)
            reference.append([ts, value])
            history.trim(ts - window, max_points)
            _trimmed_as_lists(reference, ts - window, max_points)
            assert history.pairs() == reference and history == reference
            assert history.points() == [tuple(p) for p in reference]


def test_the_stored_form_is_pairs_and_reads_back_the_same():
    state = NodeState(node="n", history={"s|0": [[1.0, 2.5], [16.0, 0]]})
    assert isinstance(state.history["s|0"], SeriesHistory)
    text = state.model_dump_json()
    assert '"history":{"s|0":[[1.0,2.5],[16.0,0.0]]}' in text
    again = NodeState.model_validate_json(text)
    assert again.history == state.history and again.model_dump_json() == text
    assert NodeState.model_validate(state.model_dump()).history == state.history


@pytest.mark.parametrize("bad", [[[1.0]], [[1.0, 2.0, 3.0]], [["x", 1.0]], [1.0], "pairs"])
def test_a_stored_history_that_is_not_pairs_of_numbers_is_rejected(bad):
    with pytest.raises(ValidationError):
        NodeState.model_validate({"node": "n", "history": {"s|0": bad}})
    with pytest.raises(ValidationError):
        NodeState.model_validate_json(json.dumps({"node": "n", "history": {"s|0": bad}}))


def test_until_keeps_the_points_up_to_the_horizon():
    history = SeriesHistory([(1.0, 1.0), (5.0, 2.0), (3.0, 3.0)])
    assert history.until(3.0) == [(1.0, 1.0), (3.0, 3.0)] and len(history) == 3
