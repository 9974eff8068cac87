"""Admit: a snapshot no newer than the last one seen from its source and instance on the node is a
redelivery (Kafka delivers at least once) and changes nothing. :func:`redelivered` is the one place that
rule lives: the stage applies it, and the processor asks it before a step to skip decoding and copying."""

from __future__ import annotations

from tailhound.snapshot import Snapshot

from ..node_state import NodeState, source_key
from .step import Step


def redelivered(state: NodeState, snapshot: Snapshot) -> bool:
    """Whether `snapshot` is not newer than what its source and instance on the node already sent."""
    last = state.last_ts.get(source_key(snapshot))
    return last is not None and snapshot.ts <= last


def stage(step: Step) -> bool:
    if redelivered(step.state, step.snapshot):
        return False
    step.state.last_ts[source_key(step.snapshot)] = step.snapshot.ts
    return True
