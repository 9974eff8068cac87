"""`tailhound explain INCIDENT`: why this cause and not that one, from the evidence an incident recorded.

The incident's events come from the incidents topic (as ``tailhound incidents list`` reads them) or from a
file: the JSON lines ``tailhound replay --out`` writes, or a JSON document holding one event or a list of
them. The answer is read from the latest event that carries candidates (a ``resolved`` event keeps only
the differential): the ranked candidates with the rules that fire, are pending or are quiet for each, and
for every other candidate (or the one asked about with ``--versus``) the reasons it is not the root cause.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tailhound.errors import TailhoundError
from tailhound.incident import Candidate, IncidentEvent
from tailhound.settings import Settings

#: a file of incident events is read up to this size (a replay of a long recording stays far below)
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINES = 200_000


def events_from_file(path: Path) -> list[IncidentEvent]:
    """Incident events from JSON lines or a JSON document (one event, or a list); bad lines are skipped."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TailhoundError(f"cannot read {path}: {exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise TailhoundError(f"{path}: over {MAX_FILE_BYTES:,} bytes")
    stripped = text.strip()
    docs: Iterable[object]
    whole = _json_or_none(stripped) if stripped.startswith(("[", "{")) else None
    if isinstance(whole, (list, dict)):  # one JSON document (JSON lines of two or more events are not one)
        docs = whole if isinstance(whole, list) else [whole]
    else:
        docs = (_json_or_none(line) for line in text.splitlines()[:MAX_LINES] if line.strip())
    out = []
    for doc in docs:
        try:
            out.append(IncidentEvent.model_validate(doc))
        except ValueError:
            continue  # not an incident event (a summary line, another record): not ours to explain
    return out


def topic_events(settings: Settings) -> list[IncidentEvent]:
    """Every incident event still on the incidents topic (what ``tailhound incidents list`` reads)."""
    from .state_topic import incident_events

    return [e for events in incident_events(settings).values() for e in events]


def _json_or_none(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def pick(events: list[IncidentEvent], incident: str | None) -> list[IncidentEvent]:
    """The events of one incident (by id or unique id prefix; none given: the only incident there is)."""
    ids = sorted({e.incident_id for e in events})
    if incident is not None:
        ids = [i for i in ids if i == incident] or [i for i in ids if i.startswith(incident)]
    if not ids:
        raise TailhoundError(f"no incident {incident}" if incident else "no incident events found")
    if len(ids) > 1:
        raise TailhoundError(f"{len(ids)} incidents match; name one: " + ", ".join(ids[:10]))
    mine = {e.sequence: e for e in events if e.incident_id == ids[0]}
    return [mine[s] for s in sorted(mine)]


def explain(events: list[IncidentEvent], versus: str | None = None) -> str:
    """The answer, as text: the ranked candidates and why the root cause and not the others."""
    if not events:
        raise TailhoundError("no events to explain")
    last = events[-1]
    shown = next((e for e in reversed(events) if e.candidates), last)
    lines = [
        f"{last.incident_id}: {last.root_cause} on {last.scope.describe()} ({last.event}, "
        f"event #{shown.sequence} explained)"
    ]
    if last.differential is not None:
        d = last.differential
        lines += [f"NOT CERTAIN: {d.lead} or {d.runner_up}. {d.why}", f"Tell them apart: {d.check}"]
    if not shown.candidates:
        lines.append("This incident recorded no candidates (an older tailhound, or a rule-removed resolution).")
        return "\n".join(lines)
    lines.append("Candidates, ranked (score: share of the firing rules it explains x share of its rules that hold):")
    for k, c in enumerate(shown.candidates, 1):
        lines += _candidate_lines(k, c)
    lead = shown.candidates[0]
    others = [c for c in shown.candidates[1:] if versus is None or str(c.root_cause) == versus]
    if versus is not None and not others:
        names = ", ".join(str(c.root_cause) for c in shown.candidates)
        raise TailhoundError(f"{versus} is not a candidate of {last.incident_id} (candidates: {names})")
    for other in others:
        lines.append(f"Why {lead.root_cause} and not {other.root_cause}:")
        lines += [f"  - {reason}" for reason in why_not(lead, other, shown)]
    return "\n".join(lines)


def _candidate_lines(k: int, c: Candidate) -> list[str]:
    out = [f"{k}. {c.root_cause} (score {c.score:.2f})"]
    out += [f"     for:     {f.describe()}" for f in c.supports]
    out += [f"     against: {f.describe()}" for f in c.against]
    if c.unexplained:
        out.append(f"     does not explain: {', '.join(c.unexplained)}")
    return out


def why_not(lead: Candidate, other: Candidate, event: IncidentEvent) -> list[str]:
    """The recorded reasons `other` is not the root cause."""
    reasons = []
    if other.unexplained:
        reasons.append(
            f"{other.root_cause} does not explain {', '.join(other.unexplained)}, which {lead.root_cause} does"
        )
    if not any(f.state == "firing" for f in other.supports):
        pending = [f.rule for f in other.supports if f.state == "pending"]
        reasons.append(f"no rule of {other.root_cause} fires" + (f" ({', '.join(pending)} pending)" if pending else ""))
    if other.against:
        reasons.append(f"{other.root_cause}'s own rules disagree: " + "; ".join(f.describe() for f in other.against))
    if other.score >= lead.score:
        reasons.append(
            f"both explain what fires equally well: {lead.root_cause} is ranked first because it is "
            "the more fundamental cause (the causal order of the rule pack)"
        )
    d = event.differential
    if d is not None and {str(d.lead), str(d.runner_up)} == {str(lead.root_cause), str(other.root_cause)}:
        reasons.append(f"but the signals cannot rule {other.root_cause} out: {d.check}")
    return reasons or [f"{other.root_cause} scores lower ({other.score:.2f} vs {lead.score:.2f})"]
