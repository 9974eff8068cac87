"""Correlation: the firing and pending rules of the node -> incident events (one incident per fault
domain, the deepest cause as root, symptoms attached; :mod:`tailhound.streams.correlate`)."""

from __future__ import annotations

from ..correlate import correlate
from .step import Step


def stage(step: Step) -> bool:
    state = step.state
    step.events = correlate(state.incidents, state.orphans, step.firing, step.rules, step.snapshot, state.models,
                            step.pending)
    return True
