"""Rule evaluation as a pure state machine: ``evaluate(state, snapshot, rules) -> (state, events)``.

The Faust agent keeps one :class:`NodeState` per node in a changelogged table and calls this function
for every snapshot; replay and tests call it directly. Everything runs in event time (``snapshot.ts``).

Per rule and node:
- an entity (a GPU, an engine, the node) whose condition holds becomes *pending*; once it has held
  for the rule's ``for`` it is *firing* (with a ``min_for``, sooner the further past its bounds the
  evidence is, never before ``min_for``: :func:`tailhound.streams.ruleset.condition_eval.required_hold`);
- it stops firing when the condition has been false for ``keep_firing_for``, or when it has not been
  seen for ``stale_after_s`` (its source went away);
- the firing entities of a rule on a node form one incident: it opens with the first entity, is
  *updated* when another entity joins (the scope only grows), and *resolves* when none is firing.

Rules read the node's merged view (:mod:`tailhound.streams.latest_values`): the latest value of every signal from
every source of the node, counter rates, and derived ratios (computed per signal as rules read it);
conditions are judged by :mod:`tailhound.streams.ruleset.condition_eval`'s semantics, compiled once per rule set by
:mod:`tailhound.streams.ruleset.plan`. A rule holding no state is stepped only when the snapshot changed a signal it
reads. Snapshots older than the newest already seen from the same source (and instance) on the node are
ignored, so a re-delivered message (at-least-once) changes nothing.
"""

from __future__ import annotations

import time

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import IncidentEvent
from tailhound.snapshot import Snapshot

from .evidence import render_action
from .latest_values import LatestValues
from .loadmodel import LoadModel
from .node_state import FiringEntity, NodeState, RuleState, heal_future, source_key
from .ruleset.rulefile import RuleSet
from .stages import PIPELINE, STAGE_NAMES, Step

__all__ = [
    "DEFAULT_STALE_AFTER_S",
    "FiringEntity",
    "NodeState",
    "RuleState",
    "evaluate",
    "heal_future",
    "render_action",
    "source_key",
]

DEFAULT_STALE_AFTER_S = 300.0


def evaluate(
    state: NodeState | None,
    snapshot: Snapshot,
    rules: RuleSet,
    catalog: Catalog | None = None,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
    latest: LatestValues | None = None,
    copy: bool = True,
    load_models: dict[str, LoadModel] | None = None,
    sla: dict[str, dict[str, float]] | None = None,
    timings: dict[str, float] | None = None,
    all_stats: bool = False,
) -> tuple[NodeState, list[IncidentEvent]]:
    """One snapshot of a node: update what the node reports, step every rule that reads it.

    `latest` is the node's in-memory view (the processor keeps one per node); without it the state
    carries one privately, so calling evaluate() in a loop works too. `timings`, when given, adds the
    seconds each stage took to its entry (``{"admit": ..., "signals": ..., "rules": ...}``). Window
    statistics (``latency.ttft.p95`` ...) are derived only where `rules` or `load_models` can read them
    (:mod:`tailhound.streams.ruleset.rule_reads`), all of them with `all_stats`.
    """
    carried = state._latest if state is not None else None
    if state is None:
        state = NodeState(node=snapshot.node)
    elif copy:  # the caller keeps its state object as it was (the processor passes a fresh one: copy=False)
        state = state.model_copy(deep=True)
    if latest is None:
        latest = carried if carried is not None else LatestValues()
    state._latest = latest
    step = Step(
        state=state,
        snapshot=snapshot,
        rules=rules,
        catalog=catalog or default_catalog(),
        latest=latest,
        stale_after_s=stale_after_s,
        load_models=load_models,
        sla=sla,
        all_stats=all_stats,
    )
    if timings is None:
        for stage in PIPELINE:
            if not stage(step):
                return state, []
    else:  # seconds spent per stage, added up (the worker's tailhound_stage_seconds_total{stage})
        clock = time.perf_counter
        for name, stage in zip(STAGE_NAMES, PIPELINE, strict=True):
            t0 = clock()
            go_on = stage(step)
            timings[name] = timings.get(name, 0.0) + clock() - t0
            if not go_on:
                return state, []
    if copy:
        state.sync()
    return state, step.events
