"""``tailhound rules backtest``: replay recordings through a rule set and judge what it opened.

Per rule (:mod:`.incidents`), against a truth file of labelled fault windows (:mod:`.truth`), and against
another version of the rules (``--against DIR`` or ``GIT_REF``: incidents gained, lost, opened earlier or
later). Every replay goes through :func:`tailhound.streams.replay.replay_records`, the worker's pure core,
over the same records (:mod:`tailhound.rulestest.recordings`).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tailhound.errors import TailhoundError
from tailhound.recording import require_records
from tailhound.yamlfile import load_yaml_model

from .incidents import Incident, Replayed, RuleStats, fold_incidents, rule_stats
from .recordings import ProgressLine, ReadProgress, Warn, iter_recordings
from .truth import TruthFile, TruthScore, score

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
