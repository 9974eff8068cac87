"""One series' short history (what ``growing_for`` conditions and demand read): its points as two float columns.

Stored in a node's state record as ``[[ts, value], ...]``, as it always was; in memory as two ``array('d')``
columns, 16 bytes a point instead of ~110 for a list of two floats (a node's histories were ~11 KB)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema


class SeriesHistory:
    """Points (event time, value) in the order they were appended."""

    __slots__ = ("ts", "values")

    def __init__(self, points: Iterable[tuple[float, float] | list[float]] = ()) -> None:
        self.ts, self.values = array("d"), array("d")
        for t, v in points:
            self.ts.append(t)
            self.values.append(v)

    def append(self, ts: float, value: float) -> None:
        self.ts.append(ts)
        self.values.append(value)

    def trim(self, cutoff: float, max_points: int) -> None:
        """Drop points from the front while the first is older than `cutoff` or there are over `max_points`."""
        ts, n, i = self.ts, len(self.ts), 0
        while i < n and (ts[i] < cutoff or n - i > max_points):
            i += 1
        if i:
            del self.ts[:i], self.values[:i]

    def until(self, horizon: float) -> SeriesHistory:
        """The points not after `horizon` (a new history)."""
        return SeriesHistory((t, v) for t, v in self if t <= horizon)

    def points(self) -> list[tuple[float, float]]:
        return list(zip(self.ts, self.values, strict=True))

    def pairs(self) -> list[list[float]]:
        """The stored form: ``[[ts, value], ...]``."""
        return [[t, v] for t, v in zip(self.ts, self.values, strict=True)]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.ts, self.values, strict=True)

    def __len__(self) -> int:
        return len(self.ts)

    def __getitem__(self, i: int) -> tuple[float, float]:
        return self.ts[i], self.values[i]

    def __eq__(self, other: object) -> bool:
        """Equal to a history or a sequence of pairs with the same points."""
        if isinstance(other, SeriesHistory):
            return self.ts == other.ts and self.values == other.values
        try:
            return self.points() == [(t, v) for t, v in other]  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (mutable)

    def __repr__(self) -> str:
        return f"SeriesHistory({self.pairs()!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        number = core_schema.float_schema()
        pairs = core_schema.list_schema(core_schema.tuple_schema([number, number]))
        return core_schema.json_or_python_schema(
            json_schema=core_schema.no_info_after_validator_function(cls, pairs),
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(cls), core_schema.no_info_after_validator_function(cls, pairs)]
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda h: h.pairs(), return_schema=core_schema.list_schema(core_schema.list_schema(number))
            ),
        )
