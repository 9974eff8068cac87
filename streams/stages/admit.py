"""Admit: a snapshot no newer than the last one seen from its source and instance on the node is a
redelivery (Kafka delivers at least once) and changes nothing."""

from __future__ import annotations

from ..node_state import source_key
from .step import Step


def stage(step: Step) -> bool:
    key = source_key(step.snapshot)
    last = step.state.last_ts.get(key)
    if last is not None and step.snapshot.ts <= last:
        return False
    step.state.last_ts[key] = step.snapshot.ts
    return True
