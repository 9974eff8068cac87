"""Route: walk the routing tree to find the receivers of a candidate notification.

Matching uses the group's lead incident's labels, with ``severity`` raised to the group's highest and
``transient`` true only when every incident is. The first child route that matches takes the group
(``continue: true`` lets later siblings take it too); a route none of whose children match delivers
to its own receiver. Updates and resolves also go to every receiver that was sent the page, so a
resolve reaches wherever the page went even if the routes changed in between.
"""

from __future__ import annotations

from tailhound.notifier.config import Route
from tailhound.notifier.matchers import incident_labels, matches_all
from tailhound.vocabulary import highest_severity

from . import Context, Draft


def route(cands: list[Draft], ctx: Context) -> list[Draft]:
    out = []
    for cand in cands:
        labels = route_labels(cand)
        routed = [] if cand.kind == "resolved" else receivers_for(ctx.config.route, labels)
        logs = cand.group.logs.values()
        earlier = [log.receiver for log in logs if log.is_open() or ((cand.flapping or cand.settled) and log.sequence)]
        names = list(dict.fromkeys(earlier + routed))
        if not names:
            cand.suppressed = "no receiver"
            continue
        cand.receivers = names
        out.append(cand)
    return out


def route_labels(cand: Draft) -> dict[str, str]:
    labels = incident_labels(cand.incidents[0])
    labels.update(cand.group.labels)
    labels["severity"] = highest_severity(e.severity for e in cand.incidents)
    labels["transient"] = "true" if all(e.transient for e in cand.incidents) else "false"
    return labels


def receivers_for(node: Route, labels: dict[str, str], inherited: str | None = None) -> list[str]:
    """Receivers of `labels` below `node` (which already matched)."""
    own = node.receiver or inherited
    found: list[str] = []
    matched = False
    for child in node.routes:
        if not matches_all(child.matchers, labels):
            continue
        matched = True
        found.extend(receivers_for(child, labels, own))
        if not child.continue_:
            break
    if not matched and own:
        found.append(own)
    return found
