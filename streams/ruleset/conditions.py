"""The `when:` language of rules: condition models (pydantic, strict) and helpers to walk them.

Leaves compare one signal of the rule's entity (a GPU, an engine, the node) with a threshold, its baseline,
another signal, its peers, a trend, a crossing count, or say it stopped arriving (``absent``); ``reduce``
folds a signal of other entities (GPU values in an engine rule) over the node. Leaves combine with ``all``,
``any`` and ``not``. Every form, with examples, is in README "Rules".
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    model_validator,
)

from tailhound.durations import Duration, parse_duration  # noqa: F401 - rule code imports both from here


class Reduce(StrEnum):
    MAX = "max"
    MIN = "min"
    MEAN = "mean"
    SUM = "sum"
    COUNT = "count"


class Ref(BaseModel):
    """A right-hand side that is not a constant: another signal, or the left signal's baseline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str | None = None
    reduce: Reduce | None = None
    baseline: float | None = Field(default=None, gt=0, description="Multiple of the left signal's baseline.")
    peers: float | None = Field(
        default=None,
        gt=0,
        description="Multiple of the median of the left signal over the entity's peers: the other entities of "
        "its kind on the node (the other GPUs, the other engines), at least MIN_PEERS of them.",
    )
    times: float = Field(default=1.0, gt=0, description="Multiplier of the other signal.")

    @model_validator(mode="after")
    def _one_kind(self) -> Ref:
        kinds = [k for k in ("signal", "baseline", "peers") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("a reference needs exactly one of `signal`, `baseline` or `peers`")
        if self.signal is None and (self.reduce is not None or self.times != 1.0):
            raise ValueError(f"`reduce` and `times` go with `signal`, not `{kinds[0]}`")
        return self

    def describe(self) -> str:
        if self.baseline is not None:
            return f"{self.baseline:g}x baseline"
        if self.peers is not None:
            return f"{self.peers:g}x peer median"
        red = f"{self.reduce.value}(" if self.reduce else ""
        return (
            f"{self.times:g} x {red}{self.signal}{')' if self.reduce else ''}"
            if self.times != 1
            else f"{red}{self.signal}{')' if self.reduce else ''}"
        )


def _bound(v: Any) -> Any:
    """A mapping is a reference: validate it as one, so its errors are the ones reported."""
    if isinstance(v, dict):
        try:
            return Ref.model_validate(v)
        except ValidationError as exc:
            raise ValueError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
    return v


Bound = Annotated[float | Ref, BeforeValidator(_bound)]
_OPS = {"above": ">", "at_least": ">=", "below": "<", "at_most": "<="}
#: Bounds of a transition counter: it keeps at most MAX_CROSSING_TIMES timestamps per entity (crossings.py).
MAX_CROSSING_TIMES = 32
MAX_CROSSING_WINDOW_S = 3600.0


class Crossed(BaseModel):
    """``crossed: {times: 3, within: 10m}``: the comparison changed verdict (either way) at least `times`
    times within the window, in the spirit of PromQL ``changes()`` over a boolean."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    times: int = Field(ge=1, le=MAX_CROSSING_TIMES)
    within: Duration = Field(gt=0, le=MAX_CROSSING_WINDOW_S)


class SignalCondition(BaseModel):
    """One signal of the entity compared with a constant, another signal or its baseline, or a trend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str
    reduce: Reduce | None = None
    above: Bound | None = None
    at_least: Bound | None = None
    below: Bound | None = None
    at_most: Bound | None = None
    above_baseline: float | None = Field(default=None, gt=0, description="Shorthand: above: {baseline: X}.")
    growing_for: Duration | None = Field(default=None, gt=0, description="The value rose over this window.")
    crossed: Crossed | None = Field(default=None, description="Count the comparison's changes instead.")
    min_observations: int | None = Field(
        default=None, ge=1, description="Percentile signals: at least this many requests in the window."
    )

    @model_validator(mode="before")
    @classmethod
    def _sugar(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("above_baseline") is not None:
            if data.get("above") is not None:
                raise ValueError("use either `above` or `above_baseline`")
            data = {**data, "above": {"baseline": data["above_baseline"]}}
        return data

    @model_validator(mode="after")
    def _one_op(self) -> SignalCondition:
        set_ops = [op for op in _OPS if getattr(self, op) is not None]
        if len(set_ops) > 1 or (not set_ops and self.growing_for is None):
            raise ValueError(
                f"a condition needs exactly one of {', '.join(_OPS)} (or growing_for); got {set_ops or 'none'}"
            )
        bound = getattr(self, set_ops[0]) if set_ops else None
        if isinstance(bound, Ref) and bound.peers is not None and self.reduce is not None:
            raise ValueError("`peers` compares one entity with the others: it cannot go with `reduce`")
        if self.crossed is not None and (not set_ops or self.growing_for is not None):
            raise ValueError(
                f"`crossed` counts the changes of a comparison: give it one of {', '.join(_OPS)} and no growing_for"
            )
        return self

    def model_post_init(self, _context: Any) -> None:
        op = next((op for op in _OPS if getattr(self, op) is not None), None)
        object.__setattr__(self, "_op", op)

    _op: str | None = PrivateAttr(default=None)

    @property
    def op(self) -> str | None:
        return self._op

    @property
    def symbol(self) -> str:
        return _OPS[self.op] if self.op else "rising"

    @property
    def bound(self) -> Bound | None:
        return getattr(self, self.op) if self.op else None

    @property
    def threshold(self) -> float | None:
        """The constant threshold, when the bound is one."""
        b = self.bound
        return float(b) if isinstance(b, int | float) else None

    def compare(self, value: float, limit: float) -> bool:
        return {"above": value > limit, "at_least": value >= limit, "below": value < limit, "at_most": value <= limit}[
            self.op or "above"
        ]

    def signals(self) -> Iterator[str]:
        yield self.signal
        b = self.bound
        if isinstance(b, Ref) and b.signal:
            yield b.signal


class Absent(BaseModel):
    """``{absent: gpu.temperature, for: 2m}``: the signal was seen before and has not arrived for `for`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    absent: str
    for_: Duration = Field(alias="for", gt=0)

    def signals(self) -> Iterator[str]:
        yield self.absent


class AllOf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    all: list[Condition] = Field(min_length=1)


class AnyOf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    any: list[Condition] = Field(min_length=1)


class NotOf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    not_: Condition = Field(alias="not")


def _condition_kind(v: Any) -> str | None:
    if isinstance(v, dict):
        for key in ("all", "any", "not", "absent"):
            if key in v:
                return key
        return "signal"
    if isinstance(v, BaseModel):
        return {AllOf: "all", AnyOf: "any", NotOf: "not", Absent: "absent"}.get(type(v), "signal")
    return None


Condition = Annotated[
    Annotated[SignalCondition, Tag("signal")]
    | Annotated[Absent, Tag("absent")]
    | Annotated[AllOf, Tag("all")]
    | Annotated[AnyOf, Tag("any")]
    | Annotated[NotOf, Tag("not")],
    Discriminator(_condition_kind),
]

Leaf = SignalCondition | Absent


def leaves(c: Any) -> Iterator[Leaf]:
    if isinstance(c, SignalCondition | Absent):
        yield c
    elif isinstance(c, AllOf):
        for x in c.all:
            yield from leaves(x)
    elif isinstance(c, AnyOf):
        for x in c.any:
            yield from leaves(x)
    elif isinstance(c, NotOf):
        yield from leaves(c.not_)


for _m in (AllOf, AnyOf, NotOf):
    _m.model_rebuild()
