"""What the notifier keeps for the incident console besides what the pipeline needs.

- **Recent groups.** The pipeline forgets a group a flap window after it resolved (nothing left to say about
  it). :func:`retire` keeps it instead as read-only history in ``Notifier.recent``, persisted on the state
  topic under ``recent:<group_id>`` next to ``group:`` and ``silence:`` records. The stages never read
  them: dedup, grouping and the re-opening of a group key behave as if the group were gone. At most
  MAX_RECENT_GROUPS are kept, none longer than RECENT_RETENTION_S after it resolved (:func:`evict`, a
  tombstone for each one dropped).
- **Lifecycle marks and chart data.** Every event taken in is a mark of its incident
  (:meth:`GroupState.mark`); the group keeps each incident's latest event *with* its chart series, within
  a budget per group (:func:`fit_series`) so a group's record stays well under a broker's message limit.
  Notifications never carry the series (:class:`tailhound.notifier.model.Notification` drops them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from tailhound.incident import IncidentEvent

from .limits import MAX_GROUP_SERIES_VALUES, MAX_RECENT_GROUPS, RECENT_RETENTION_S
from .state import GroupState

log = logging.getLogger(__name__)

RECENT_PREFIX = "recent:"


def recent_key(group_id: str) -> str:
    """The state-topic key of a recent (retired) group."""
    return f"{RECENT_PREFIX}{group_id}"


def retire(recent: dict[str, GroupState], grp: GroupState, dirty: set[str]) -> None:
    """Keep `grp`, which the pipeline just forgot, as history (a group of the same id kept earlier is
    replaced: it is the same incident's group, seen again)."""
    recent[grp.group_id] = grp
    dirty.add(recent_key(grp.group_id))


def evict(
    recent: dict[str, GroupState],
    now: float,
    dirty: set[str],
    *,
    max_groups: int | None = None,
    retention_s: float | None = None,
) -> None:
    """Drop recent groups that resolved more than `retention_s` (RECENT_RETENTION_S) ago, then the oldest
    beyond `max_groups` (MAX_RECENT_GROUPS)."""
    if not recent:
        return
    max_groups = MAX_RECENT_GROUPS if max_groups is None else max_groups
    retention_s = RECENT_RETENTION_S if retention_s is None else retention_s
    old = [gid for gid, grp in recent.items() if now - grp.status_since > retention_s]
    over = len(recent) - len(old) - max_groups
    if over > 0:
        dropped = set(old)
        kept = sorted((grp.status_since, gid) for gid, grp in recent.items() if gid not in dropped)
        old.extend(gid for _, gid in kept[:over])
    for gid in old:
        del recent[gid]
        dirty.add(recent_key(gid))


def restore_recent(recent: dict[str, GroupState], key: str, value: Any) -> None:
    """Take a ``recent:`` record of the state topic back; a record that does not validate is skipped with a
    warning (it is history: it never stops a takeover)."""
    try:
        grp = GroupState.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        log.warning(
            "notifier: skipping recent group record %s: %s: %s",
            key[:80],
            ".".join(map(str, err["loc"])) or "record",
            err["msg"],
        )
        return
    recent[grp.group_id] = grp


def series_values(ev: IncidentEvent) -> int:
    """How many numbers an event's chart data holds (times, values and baselines)."""
    return sum(len(s.ts) * (1 + len(s.values) + len(s.baseline)) for s in ev.series)


def fit_series(grp: GroupState) -> None:
    """Keep the chart data of the group's incidents in the order they joined while the values add up to at
    most MAX_GROUP_SERIES_VALUES; the latest events of the others are kept without theirs (their next event
    brings its series again, and is kept with them if they fit then)."""
    total = 0
    for iid, ev in grp.incidents.items():
        if not ev.series:
            continue
        size = series_values(ev)
        if total + size > MAX_GROUP_SERIES_VALUES:
            grp.incidents[iid] = ev.model_copy(update={"series": []})
        else:
            total += size


def record_intake(
    groups: dict[str, GroupState], incident_group: dict[str, str], events: Iterable[IncidentEvent]
) -> None:
    """After the intake stages: mark each event taken into a group, and fit the chart data of each group an
    event went to."""
    touched: dict[str, GroupState] = {}
    for ev in events:
        grp = groups.get(incident_group.get(ev.incident_id, ""))
        if grp is None or ev.incident_id not in grp.incidents:
            continue
        grp.mark(ev)
        if ev.series:
            touched[grp.group_id] = grp
    for grp in touched.values():
        fit_series(grp)


def mirror(groups: dict[str, GroupState], recent: dict[str, GroupState], key: str, raw: bytes | None) -> bool:
    """A standing-by notifier keeps the console's view current from the active one's writes: a ``group:`` or
    ``recent:`` record of the state topic replaces (or, a tombstone, removes) its copy. True when `key` was
    such a record. A record that does not validate is skipped with a warning."""
    kind, _, gid = key.partition(":")
    store = groups if kind == "group" else recent if f"{kind}:" == RECENT_PREFIX else None
    if store is None:
        return False
    if not raw:
        store.pop(gid, None)
        return True
    try:
        grp = GroupState.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        log.warning(
            "notifier: standby: skipping state record %s: %s: %s",
            key[:80],
            ".".join(map(str, err["loc"])) or "record",
            err["msg"],
        )
        return True
    store[grp.group_id] = grp
    if kind == "recent":
        groups.pop(grp.group_id, None)
    return True
