"""Chart series of a rolled-up incident (pure): the lead member's series, and the nodes side by side.

A group's members are node incidents (and model-stage ones) whose events carry their own chart series
(:mod:`tailhound.streams.evidence_traces`). The group keeps, bounded:

- the full series of its *source* member (the one whose evidence and actions the group shows), as of
  that member's latest event;
- per member node, a one-line **headline** (:class:`Headline`): the member's first series (its root rule's
  first comparison), the highest of its focus entities at each time -- at most
  :data:`~tailhound.incident.MAX_SERIES_ENTITIES` members, the first that joined.

The group's events carry the source's series and, when more than one node is in it, a ``per: node`` series
of the headlines re-sampled onto one time grid: the nodes of a fleet-wide fault against each other, the
slow node against the model's others. Members' events are stored without their series, so a group of a
thousand nodes stays small.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tailhound.incident import MAX_SERIES, MAX_SERIES_ENTITIES, MAX_SERIES_POINTS, EvidenceSeries, IncidentEvent


class Headline(BaseModel):
    """One member's headline signal over time (the max over its focus entities)."""

    node: str
    rule: str
    signal: str
    unit: str = ""
    op: str = ""
    threshold: float | None = None
    for_s: float = 0.0
    pending_since: float | None = None
    ts: list[float] = Field(default_factory=list)
    values: list[float | None] = Field(default_factory=list)


def headline(ev: IncidentEvent) -> Headline | None:
    """The member event's headline (None when it carries no series or has no node)."""
    node = ev.scope.node or ",".join(ev.scope.nodes)
    if not ev.series or not node:
        return None
    s = ev.series[0]
    focus = [e for e in s.focus if e in s.values] or list(s.values)[:1]
    values: list[float | None] = []
    for i in range(len(s.ts)):
        at = [v for e in focus if (v := s.values[e][i]) is not None]
        values.append(max(at) if at else None)
    return Headline(
        node=node,
        rule=s.rule,
        signal=s.signal,
        unit=s.unit,
        op=s.op,
        threshold=s.threshold,
        for_s=s.for_s,
        pending_since=s.pending_since,
        ts=list(s.ts),
        values=values,
    )


def keep_headline(headlines: dict[str, Headline], member_id: str, ev: IncidentEvent) -> None:
    """Update `member_id`'s headline from its event (bounded: the first members that joined)."""
    if member_id not in headlines and len(headlines) >= MAX_SERIES_ENTITIES:
        return
    line = headline(ev)
    if line is not None:
        headlines[member_id] = line


def nodes_view(headlines: list[Headline], open_nodes: set[str]) -> EvidenceSeries | None:
    """The headlines of the first signal the lead's headline shows, one line per node on a common grid
    (time bins over the group's span; each node's last value in a bin). None with fewer than 2 nodes."""
    if not headlines:
        return None
    lead = headlines[0]
    lines = [h for h in headlines if h.signal == lead.signal and h.ts]
    if len({h.node for h in lines}) < 2:
        return None
    start = min(h.ts[0] for h in lines)
    end = max(h.ts[-1] for h in lines)
    bins = MAX_SERIES_POINTS
    width = max((end - start) / bins, 1e-9)
    grid = sorted({min(int((t - start) / width), bins - 1) for h in lines for t in h.ts})
    index = {b: i for i, b in enumerate(grid)}
    values: dict[str, list[float | None]] = {}
    for h in lines:
        row = values.setdefault(h.node, [None] * len(grid))
        for t, v in zip(h.ts, h.values, strict=False):
            if v is not None:
                row[index[min(int((t - start) / width), bins - 1)]] = v
    focus = [h.node for h in lines if h.node in open_nodes] or [lead.node]
    ordered = {n: values[n] for n in [*focus, *[n for n in values if n not in focus]]}
    return EvidenceSeries(
        rule=lead.rule,
        signal=lead.signal,
        unit=lead.unit,
        op=lead.op,
        threshold=lead.threshold,
        for_s=lead.for_s,
        per="node",
        focus=list(dict.fromkeys(focus)),
        ts=[round(start + (b + 1) * width, 3) for b in grid],
        values=ordered,
        pending_since=min((h.pending_since for h in lines if h.pending_since is not None), default=None),
    )


def group_series(source: list[EvidenceSeries], headlines: list[Headline], open_nodes: set[str]) -> list[EvidenceSeries]:
    """What the group's event carries: the nodes side by side first (when there are several), then the source
    member's own series."""
    view = nodes_view(headlines, open_nodes)
    return ([view] if view is not None else [])[:1] + list(source)[: MAX_SERIES - (view is not None)]
