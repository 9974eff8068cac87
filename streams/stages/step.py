"""The :class:`Step` one snapshot carries through the node stage's pipeline (:mod:`tailhound.streams.stages`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tailhound.catalog import Catalog
from tailhound.incident import IncidentEvent
from tailhound.snapshot import Snapshot

from ..episode import Firing
from ..extract import SignalValues
from ..latest_values import CurrentValues, LatestValues
from ..loadmodel import LoadModel
from ..node_state import NodeState
from ..ruleset.condition_eval import EvalContext
from ..ruleset.rulefile import RuleSet


@dataclass
class Step:
    """One snapshot on its way through the node stage."""

    state: NodeState
    snapshot: Snapshot
    rules: RuleSet
    catalog: Catalog
    latest: LatestValues
    stale_after_s: float
    load_models: dict[str, LoadModel] | None = None
    sla: dict[str, dict[str, float]] | None = None
    #: derive every window statistic, not only those the rules and models can read (streams/ruleset/rule_reads.py)
    all_stats: bool = False
    #: signals: the snapshot's own values, and the node's merged view (computed per signal as rules read it)
    fresh: SignalValues = field(default_factory=dict)
    view: CurrentValues | SignalValues = field(default_factory=dict)
    #: windows: what rules are judged in
    ctx: EvalContext | None = None
    #: rules: the signals this snapshot changed (derived ones included), then the firing and pending rules
    updated: set[str] = field(default_factory=set)
    firing: dict[str, Firing] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    #: correlation: the incident events of this snapshot
    events: list[IncidentEvent] = field(default_factory=list)


#: a stage reads and fills the step; False ends the pipeline for this snapshot
Stage = Callable[[Step], bool]
