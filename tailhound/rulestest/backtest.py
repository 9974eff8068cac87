"""``tailhound rules backtest``: replay recordings through a rule set and judge what it opened.

- **per rule**: the incidents each rule was part of (as the root cause's rule or as a member: symptoms
  and causes that fired alongside), when they opened and resolved, as offsets from the recording's start;
  rules that never fired are listed too (a rule that is blind on a recording says something);
- **against a truth file** (``--truth``, YAML: labelled fault windows with their node(s) and expected root
  cause, see :class:`TruthFile`): per root cause, precision (the incidents with that cause that fall in
  one of its windows), recall (its windows that got such an incident) and time to detect (window start to
  the first event naming the cause);
- **against another version of the rules** (``--against DIR`` or ``--against GIT_REF``: the rules
  directory at that ref, read with ``git ls-tree``/``git show``): the incidents the current rules gain
  and lose, and those that open earlier or later.

Both replays go through :func:`tailhound.streams.replay.replay_records`, the worker's pure core, over the
same records (:mod:`tailhound.rulestest.recordings`: .gz/.zst, a cut-off last line is a warning).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from tailhound.durations import parse_duration
from tailhound.errors import TailhoundError
from tailhound.incident import IncidentEvent
from tailhound.recording import require_records
from tailhound.vocabulary import RootCause
from tailhound.yamlfile import load_yaml_model

from .recordings import ProgressLine, ReadProgress, Warn, iter_recordings

#: an incident opened this long after its fault window ended still belongs to it (the scenario suite's grace)
DEFAULT_GRACE_S = 300.0
#: numbers at least this large in a truth file are unix times, smaller ones offsets from the recording start
_ABSOLUTE_TS = 1e9


# --- incidents --------------------------------------------------------------------------------------------


@dataclass
class Incident:
    """All events of one incident, folded."""

    incident_id: str
    root_cause: str  # the final one
    severity: str
    rule: str
    opened_at: float
    resolved_at: float | None
    nodes: list[str]
    scope: str
    transient: bool
    rules: list[str]
    #: root cause -> event time of the first event that named it
    named_at: dict[str, float] = field(default_factory=dict)
    events: int = 0
    evidence: list[str] = field(default_factory=list)

    def end(self, default: float) -> float:
        return self.resolved_at if self.resolved_at is not None else default


def fold_incidents(events: Iterable[IncidentEvent]) -> list[Incident]:
    """One :class:`Incident` per incident id, in opening order."""
    out: dict[str, Incident] = {}
    for ev in events:
        inc = out.get(ev.incident_id)
        nodes = [ev.scope.node] if ev.scope.node else list(ev.scope.nodes)
        rules = [r for r in (ev.labels.get("rules") or ev.rule).split(",") if r]
        if inc is None:
            inc = out[ev.incident_id] = Incident(
                incident_id=ev.incident_id,
                root_cause=str(ev.root_cause),
                severity=str(ev.severity),
                rule=ev.rule,
                opened_at=ev.opened_at,
                resolved_at=None,
                nodes=nodes,
                scope=ev.scope.describe(),
                transient=ev.transient,
                rules=rules,
            )
        inc.events += 1
        inc.named_at.setdefault(str(ev.root_cause), ev.ts)
        inc.rules = sorted(set(inc.rules) | set(rules))
        inc.nodes = sorted(set(inc.nodes) | set(nodes))
        if ev.evidence:
            inc.evidence = [e.describe() for e in ev.evidence[:3]]
        if ev.event == "resolved":
            inc.resolved_at = ev.ts
        else:
            inc.root_cause, inc.severity, inc.rule = str(ev.root_cause), str(ev.severity), ev.rule
            inc.scope, inc.transient = ev.scope.describe(), ev.transient
    return list(out.values())


@dataclass
class Replayed:
    """One replay of the recordings through one rule set."""

    label: str
    rules_dir: str
    rule_names: list[str]
    symptoms: set[str]
    events: list[IncidentEvent]
    incidents: list[Incident]
    records: int
    snapshots: int
    seconds: float
    rejected: dict[str, int]


@dataclass
class RuleStats:
    rule: str
    symptom: bool
    incidents: int = 0
    as_root: int = 0
    #: (opened, resolved or None) offsets from the recording start, of the incidents it was part of
    windows: list[tuple[float, float | None]] = field(default_factory=list)


def rule_stats(rep: Replayed, start_ts: float) -> list[RuleStats]:
    stats = {name: RuleStats(name, name in rep.symptoms) for name in rep.rule_names}
    for inc in rep.incidents:
        for name in inc.rules:
            st = stats.setdefault(name, RuleStats(name, name in rep.symptoms))
            st.incidents += 1
            st.as_root += inc.rule == name
            st.windows.append(
                (inc.opened_at - start_ts, None if inc.resolved_at is None else inc.resolved_at - start_ts)
            )
    return sorted(stats.values(), key=lambda s: (-s.incidents, s.rule))


# --- the truth file ---------------------------------------------------------------------------------------


class FaultWindow(BaseModel):
    """A labelled fault: where, when, and the root cause a correct system names (none: must open nothing)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = ""
    nodes: list[str] = Field(
        default_factory=list,
        validation_alias=AliasChoices("nodes", "node"),
        description="Nodes the fault is on; empty or '*': anywhere (fleet-wide).",
    )
    start: float | str | dt.datetime
    end: float | str | dt.datetime
    root_cause: RootCause | None = Field(validation_alias=AliasChoices("root_cause", "cause", "expected_root_cause"))

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        return [] if v == ["*"] else v

    def bounds(self, start_ts: float) -> tuple[float, float]:
        return _when(self.start, start_ts), _when(self.end, start_ts)


def _when(v: float | str | dt.datetime, start_ts: float) -> float:
    """An offset from the recording start (``20m``, ``1200``), a unix time (>= 1e9) or an ISO date-time."""
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(v, int | float):
        return float(v) if v >= _ABSOLUTE_TS else start_ts + float(v)
    try:
        return start_ts + parse_duration(v)
    except ValueError:
        try:
            when = dt.datetime.fromisoformat(v)
        except ValueError:
            raise TailhoundError(f"truth file: {v!r} is neither an offset (20m) nor a date-time") from None
        return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


class TruthFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: an incident opened up to this long after its window ended still belongs to it
    grace: float = DEFAULT_GRACE_S
    faults: list[FaultWindow] = Field(min_length=1)

    @field_validator("grace", mode="before")
    @classmethod
    def _grace(cls, v: Any) -> Any:
        return parse_duration(v)


def belongs(inc: Incident, w: FaultWindow, start_ts: float, grace: float) -> bool:
    a, b = w.bounds(start_ts)
    if not a <= inc.opened_at <= b + grace:
        return False
    return not w.nodes or bool(set(w.nodes) & set(inc.nodes))


@dataclass
class CauseScore:
    root_cause: str
    windows: int
    detected: int
    incidents: int
    correct: int
    #: seconds from each detected window's start to the first event naming the cause
    detect_s: list[float]
    missed: list[str]

    @property
    def precision(self) -> float | None:
        return self.correct / self.incidents if self.incidents else None

    @property
    def recall(self) -> float | None:
        return self.detected / self.windows if self.windows else None


@dataclass
class TruthScore:
    causes: list[CauseScore]
    #: incidents inside a window that must open nothing (root_cause: none)
    negatives: list[tuple[str, Incident]]
    #: incidents no window of their root cause explains (outside the negative windows)
    spurious: list[Incident]
    grace: float

    @property
    def precision(self) -> float | None:
        n = sum(c.incidents for c in self.causes)
        return sum(c.correct for c in self.causes) / n if n else None

    @property
    def recall(self) -> float | None:
        n = sum(c.windows for c in self.causes)
        return sum(c.detected for c in self.causes) / n if n else None


def score(incidents: list[Incident], truth: TruthFile, start_ts: float) -> TruthScore:
    positives = [w for w in truth.faults if w.root_cause]
    causes = sorted({str(w.root_cause) for w in positives if w.root_cause} | {i.root_cause for i in incidents})
    out = []
    for cause in causes:
        windows = [w for w in positives if str(w.root_cause) == cause]
        mine = [i for i in incidents if i.root_cause == cause]
        correct = [i for i in mine if any(belongs(i, w, start_ts, truth.grace) for w in windows)]
        detect, missed = [], []
        for w in windows:
            hits = [i for i in mine if belongs(i, w, start_ts, truth.grace)]
            if hits:
                detect.append(min(i.named_at.get(cause, i.opened_at) for i in hits) - w.bounds(start_ts)[0])
            else:
                missed.append(w.name or f"{cause} @ {','.join(w.nodes) or 'anywhere'}")
        out.append(CauseScore(cause, len(windows), len(detect), len(mine), len(correct), detect, missed))
    negatives = [
        (w.name or "negative", i)
        for w in truth.faults
        if not w.root_cause
        for i in incidents
        if belongs(i, w, start_ts, 0.0)
    ]
    in_negative = {id(i) for _, i in negatives}
    spurious = [
        i
        for i in incidents
        if id(i) not in in_negative
        and not any(str(w.root_cause) == i.root_cause and belongs(i, w, start_ts, truth.grace) for w in positives)
    ]
    return TruthScore(out, negatives, spurious, truth.grace)


# --- two versions of the rules ----------------------------------------------------------------------------


@dataclass
class Diff:
    against: str
    gained: list[Incident]
    lost: list[Incident]
    #: (against's incident, the current one) that match but open at another time
    shifted: list[tuple[Incident, Incident]]
    same: int


def _place(inc: Incident) -> tuple[str, ...]:
    return tuple(inc.nodes)


def diff_incidents(current: list[Incident], old: list[Incident], end_ts: float, label: str) -> Diff:
    """Pair incidents with the same root cause and place whose open intervals overlap; the rest are gained
    (only the current rules open them) or lost (only the other rules did)."""
    left = list(old)
    gained, shifted, same = [], [], 0
    for inc in current:
        match = None
        for o in left:
            if (
                o.root_cause == inc.root_cause
                and _place(o) == _place(inc)
                and o.opened_at <= inc.end(end_ts)
                and inc.opened_at <= o.end(end_ts)
            ):
                match = o
                break
        if match is None:
            gained.append(inc)
            continue
        left.remove(match)
        if abs(match.opened_at - inc.opened_at) > 1e-6:
            shifted.append((match, inc))
        else:
            same += 1
    return Diff(label, gained, left, shifted, same)


def rules_at_ref(rules_dir: Path, ref: str, dest: Path) -> Path:
    """Write the rule files of `rules_dir` as they are at git `ref` into `dest`; returns `dest`."""
    rules_dir = rules_dir.resolve()

    def git(*args: str, cwd: Path) -> str:
        try:
            r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise TailhoundError("--against a git ref needs git on the PATH") from None
        if r.returncode != 0:
            raise TailhoundError(f"git {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
        return r.stdout

    if not rules_dir.is_dir():
        raise TailhoundError(f"{rules_dir}: not a directory")
    try:
        top = Path(git("rev-parse", "--show-toplevel", cwd=rules_dir).strip())
    except TailhoundError:
        raise TailhoundError(
            f"--against {ref}: {rules_dir} is not in a git checkout (pass --against DIR, or "
            "--rules a directory of a checkout)"
        ) from None
    rel = rules_dir.relative_to(top.resolve()).as_posix()
    listed = git("ls-tree", "--name-only", f"{ref}:{rel}" if rel != "." else f"{ref}:", cwd=top).split()
    names = [n for n in listed if n.endswith((".yaml", ".yml"))]
    if not names:
        raise TailhoundError(f"--against {ref}: no rule files in {rel or '.'}/ at {ref}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = f"{rel}/{name}" if rel != "." else name
        (dest / name).write_text(git("show", f"{ref}:{path}", cwd=top), encoding="utf-8")
    return dest


# --- running ----------------------------------------------------------------------------------------------


@dataclass
class BacktestReport:
    recordings: list[str]
    start_ts: float
    end_ts: float
    current: Replayed
    per_rule: list[RuleStats]
    truth: TruthScore | None = None
    truth_file: str | None = None
    against: Replayed | None = None
    diff: Diff | None = None
    warnings: list[str] = field(default_factory=list)


def replay(
    paths: list[Path], rules_dir: Path, label: str, sla: dict | None, progress: bool, warn: Warn, bounds: list[float]
) -> Replayed:
    from tailhound.streams.replay import replay_records
    from tailhound.streams.ruleset.rulefile import load_rules

    rs = load_rules(rules_dir)
    pr = ReadProgress(total_bytes=sum(p.stat().st_size for p in paths if p.exists()))
    line = ProgressLine(label, pr, enabled=progress)

    def records():
        for rec in line.wrap(iter_recordings(paths, warn, pr)):
            if not bounds:
                bounds.extend((rec.ts, rec.ts))
            elif rec.ts < bounds[0]:
                bounds[0] = rec.ts
            elif rec.ts > bounds[1]:
                bounds[1] = rec.ts
            yield rec

    res = replay_records(records(), rs, sla=sla)
    require_records(res.records, paths)
    return Replayed(
        label=label,
        rules_dir=str(rules_dir),
        rule_names=[r.name for r in rs.rules],
        symptoms={r.name for r in rs.rules if r.symptom},
        events=res.events,
        incidents=fold_incidents(res.events),
        records=res.records,
        snapshots=res.snapshots,
        seconds=res.seconds,
        rejected=dict(res.rejected),
    )


def run_backtest(
    recordings: list[Path],
    rules_dir: Path,
    *,
    truth: Path | None = None,
    against: str | None = None,
    sla: dict | None = None,
    progress: bool = True,
    warn: Callable[[str], None] | None = None,
) -> BacktestReport:
    warnings: list[str] = []

    def note(msg: str) -> None:
        if msg not in warnings:
            warnings.append(msg)
            if warn is not None:
                warn(msg)

    truth_model = load_yaml_model(truth, TruthFile) if truth is not None else None
    bounds: list[float] = []
    current = replay(recordings, Path(rules_dir), "backtest", sla, progress, note, bounds)
    if not bounds:
        raise TailhoundError("the recordings hold no records")
    start_ts, end_ts = bounds
    report = BacktestReport(
        recordings=[str(p) for p in recordings],
        start_ts=start_ts,
        end_ts=end_ts,
        current=current,
        per_rule=rule_stats(current, start_ts),
        warnings=warnings,
    )
    if truth_model is not None:
        report.truth = score(current.incidents, truth_model, start_ts)
        report.truth_file = str(truth)
    if against is not None:
        with tempfile.TemporaryDirectory(prefix="tailhound-against-") as tmp:
            other_dir = Path(against)
            if not other_dir.is_dir():
                other_dir = rules_at_ref(Path(rules_dir), against, Path(tmp) / "rules")
            report.against = replay(recordings, other_dir, f"against {against}", sla, progress, lambda _m: None, [])
        report.diff = diff_incidents(current.incidents, report.against.incidents, end_ts, against)
    return report
