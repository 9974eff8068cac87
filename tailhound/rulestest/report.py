"""Text and JSON renderings of backtests and replays, for people (tables) and for tools (JSON).

Times are offsets from the recording's first record (``+12m30s``), the way people read a recording;
JSON carries the unix times too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from tailhound.incident import IncidentEvent

from .backtest import BacktestReport
from .incidents import Incident, Replayed
from .unit import fmt_duration


def offset(ts: float | None, start_ts: float) -> str:
    """``+12m30s`` from the start (``open`` for no time)."""
    if ts is None:
        return "open"
    d = ts - start_ts
    return ("+" if d >= 0 else "-") + fmt_duration(abs(d))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain left-aligned table (the last column is not padded)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(widths[i]) if i < len(cells) - 1 else c for i, c in enumerate(cells)]
        return "  ".join(padded).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _dur(v: float | None) -> str:
    return "-" if v is None else fmt_duration(v)


def _windows(windows: list[tuple[float, float | None]], limit: int = 4) -> str:
    shown = [f"+{fmt_duration(a)}..{'open' if b is None else '+' + fmt_duration(b)}" for a, b in windows[:limit]]
    more = f" (+{len(windows) - limit} more)" if len(windows) > limit else ""
    return ", ".join(shown) + more


def _incident_row(inc: Incident, start_ts: float) -> list[str]:
    return [
        offset(inc.opened_at, start_ts),
        offset(inc.resolved_at, start_ts),
        inc.root_cause,
        inc.severity,
        inc.scope,
        inc.rule,
    ]


def render_backtest_table(r: BacktestReport) -> str:
    cur = r.current
    span = fmt_duration(r.end_ts - r.start_ts)
    out = [
        f"backtest of {', '.join(r.recordings)}: {cur.records:,} records over {span} "
        f"(from {r.start_ts:.0f}), rules {cur.rules_dir}: {len(cur.incidents)} incidents "
        f"({cur.seconds:.1f} s)\n"
    ]
    if cur.rejected:
        out.append("skipped snapshots: " + ", ".join(f"{k} {v}" for k, v in sorted(cur.rejected.items())) + "\n")
    out.append("\nper rule (incidents it was part of; times from the recording start):\n")
    out.append(
        table(
            ["rule", "kind", "incidents", "as root", "when"],
            [
                [
                    s.rule,
                    "symptom" if s.symptom else "cause",
                    s.incidents,
                    s.as_root,
                    _windows(s.windows) or "never fired",
                ]
                for s in r.per_rule
            ],
        )
    )
    if cur.incidents:
        out.append("\nincidents:\n")
        out.append(
            table(
                ["opened", "resolved", "root cause", "severity", "scope", "rule"],
                [_incident_row(i, r.start_ts) for i in cur.incidents],
            )
        )
    if r.truth is not None:
        t = r.truth
        out.append(f"\nagainst the truth in {r.truth_file} (grace {fmt_duration(t.grace)} after a window):\n")
        rows = [
            [
                c.root_cause,
                c.windows,
                c.detected,
                _pct(c.recall),
                c.incidents,
                c.correct,
                _pct(c.precision),
                _dur(_median(c.detect_s)),
                _dur(max(c.detect_s) if c.detect_s else None),
            ]
            for c in t.causes
        ]
        rows.append(
            [
                "all",
                sum(c.windows for c in t.causes),
                sum(c.detected for c in t.causes),
                _pct(t.recall),
                sum(c.incidents for c in t.causes),
                sum(c.correct for c in t.causes),
                _pct(t.precision),
                _dur(_median([d for c in t.causes for d in c.detect_s])),
                "",
            ]
        )
        out.append(
            table(
                [
                    "root cause",
                    "windows",
                    "detected",
                    "recall",
                    "incidents",
                    "correct",
                    "precision",
                    "detect p50",
                    "detect max",
                ],
                rows,
            )
        )
        for c in t.causes:
            for name in c.missed:
                out.append(f"  missed: {name}\n")
        for name, inc in t.negatives:
            out.append(
                f"  opened during {name} (must open nothing): {inc.root_cause} on {inc.scope} at "
                f"{offset(inc.opened_at, r.start_ts)}\n"
            )
        for inc in t.spurious:
            out.append(
                f"  outside the windows of its cause: {inc.root_cause} on {inc.scope} at "
                f"{offset(inc.opened_at, r.start_ts)}\n"
            )
    if r.diff is not None and r.against is not None:
        d = r.diff
        out.append(
            f"\nagainst {d.against}: {len(r.against.incidents)} incidents there, "
            f"{len(cur.incidents)} here: {len(d.gained)} gained, {len(d.lost)} lost, "
            f"{len(d.shifted)} opened at another time, {d.same} the same\n"
        )
        rows = [["gained", *_incident_row(i, r.start_ts)] for i in d.gained]
        rows += [["lost", *_incident_row(i, r.start_ts)] for i in d.lost]
        rows += [
            [
                f"moved {'+' if new.opened_at >= old.opened_at else '-'}"
                f"{fmt_duration(abs(new.opened_at - old.opened_at))}",
                *_incident_row(new, r.start_ts),
            ]
            for old, new in d.shifted
        ]
        if rows:
            out.append(table(["change", "opened", "resolved", "root cause", "severity", "scope", "rule"], rows))
    return "".join(out)


def _incident_json(inc: Incident, start_ts: float) -> dict[str, Any]:
    return {
        "incident_id": inc.incident_id,
        "root_cause": inc.root_cause,
        "severity": inc.severity,
        "rule": inc.rule,
        "rules": inc.rules,
        "scope": inc.scope,
        "nodes": inc.nodes,
        "transient": inc.transient,
        "opened_at": inc.opened_at,
        "resolved_at": inc.resolved_at,
        "opened_offset_s": inc.opened_at - start_ts,
        "resolved_offset_s": None if inc.resolved_at is None else inc.resolved_at - start_ts,
        "evidence": inc.evidence,
    }


def _replayed_json(rep: Replayed, start_ts: float) -> dict[str, Any]:
    return {
        "rules_dir": rep.rules_dir,
        "records": rep.records,
        "snapshots": rep.snapshots,
        "seconds": round(rep.seconds, 3),
        "rejected": rep.rejected,
        "incidents": [_incident_json(i, start_ts) for i in rep.incidents],
    }


def backtest_dict(r: BacktestReport) -> dict[str, Any]:
    out: dict[str, Any] = {
        "recordings": r.recordings,
        "start_ts": r.start_ts,
        "end_ts": r.end_ts,
        "warnings": r.warnings,
        "current": _replayed_json(r.current, r.start_ts),
        "per_rule": [
            {
                "rule": s.rule,
                "symptom": s.symptom,
                "incidents": s.incidents,
                "as_root": s.as_root,
                "windows": [{"opened_offset_s": a, "resolved_offset_s": b} for a, b in s.windows],
            }
            for s in r.per_rule
        ],
    }
    if r.truth is not None:
        t = r.truth
        out["truth"] = {
            "file": r.truth_file,
            "grace_s": t.grace,
            "precision": t.precision,
            "recall": t.recall,
            "causes": [
                {
                    "root_cause": c.root_cause,
                    "windows": c.windows,
                    "detected": c.detected,
                    "recall": c.recall,
                    "incidents": c.incidents,
                    "correct": c.correct,
                    "precision": c.precision,
                    "detect_s": c.detect_s,
                    "missed": c.missed,
                }
                for c in t.causes
            ],
            "negatives": [{"window": n, "incident": _incident_json(i, r.start_ts)} for n, i in t.negatives],
            "spurious": [_incident_json(i, r.start_ts) for i in t.spurious],
        }
    if r.diff is not None and r.against is not None:
        d = r.diff
        out["against"] = {
            "ref": d.against,
            **_replayed_json(r.against, r.start_ts),
            "gained": [_incident_json(i, r.start_ts) for i in d.gained],
            "lost": [_incident_json(i, r.start_ts) for i in d.lost],
            "shifted": [
                {"from": _incident_json(a, r.start_ts), "to": _incident_json(b, r.start_ts)} for a, b in d.shifted
            ],
            "same": d.same,
        }
    return out


def render_backtest_json(r: BacktestReport) -> str:
    return json.dumps(backtest_dict(r), indent=2) + "\n"


def render_events_table(events: Sequence[IncidentEvent], start_ts: float | None, evidence: int = 3) -> str:
    """Incident events for people: offset from the recording start, event, cause, severity, scope, rule, and
    the first pieces of evidence on the lines below."""
    if not events:
        return "no incident events\n"
    start = start_ts if start_ts is not None else min(e.ts for e in events)
    rows = []
    notes: dict[int, list[str]] = {}
    for i, ev in enumerate(events):
        rows.append(
            [
                offset(ev.ts, start),
                ev.event,
                str(ev.root_cause),
                str(ev.severity),
                ev.scope.describe(),
                ev.rule,
                ev.incident_id,
            ]
        )
        notes[i] = [e.describe() for e in ev.evidence[:evidence]] if evidence else []
    text = table(["at", "event", "root cause", "severity", "scope", "rule", "incident"], rows).splitlines()
    out = text[:2]
    for i, line in enumerate(text[2:]):
        out.append(line)
        out.extend(f"      {n}" for n in notes[i])
    return "\n".join(out) + "\n"
