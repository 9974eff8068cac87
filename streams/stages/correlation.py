"""Correlation: the firing and pending rules of the node -> incident events (one incident per fault
domain, the deepest cause as root, symptoms attached; :mod:`tailhound.streams.correlate`), each with the
chart series of its rules (:mod:`tailhound.streams.evidence_traces`); then the traces no rule or open incident needs
any longer are dropped."""

from __future__ import annotations

from ..candidates import observer
from ..correlate import correlate
from ..evidence_traces import prune, series_of
from .step import Step


def stage(step: Step) -> bool:
    state = step.state
    step.events = correlate(
        state.incidents,
        state.orphans,
        step.firing,
        step.rules,
        step.snapshot,
        state.model_names,
        step.pending,
        observer(step.rules, step.ctx, step.catalog),
    )
    traces = state.traces
    if traces:
        if step.events:
            step.events = [
                ev.model_copy(update={"series": series_of(traces, _rules_of(ev), state.node)}) for ev in step.events
            ]
        needed = set(state.rules)
        for ep in state.incidents.values():
            needed.update(ep.members)
        prune(traces, needed)
    return True


def _rules_of(ev) -> list[str]:
    """The incident's rules, its root rule first."""
    members = [r for r in ev.labels.get("rules", "").split(",") if r and r != ev.rule]
    return [ev.rule, *members]
