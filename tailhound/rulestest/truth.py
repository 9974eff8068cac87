"""Backtest truth files (``--truth``): labelled fault windows and the precision, recall and time to detect per
root cause of the incidents a replay opened."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from tailhound.durations import parse_duration
from tailhound.errors import TailhoundError
from tailhound.vocabulary import RootCause

from .incidents import Incident

#: an incident opened this long after its fault window ended still belongs to it (the scenario suite's grace)
DEFAULT_GRACE_S = 300.0
#: numbers at least this large in a truth file are unix times, smaller ones offsets from the recording start
_ABSOLUTE_TS = 1e9


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
