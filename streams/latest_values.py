"""What one node currently reports, across all its sources: the values rules are judged on.

A node's snapshots arrive one source at a time (dcgm, then vllm, then node ...). Rules that combine
sources ("TPOT P95 over 2x baseline AND DRAM bandwidth over 85%") need the latest value of every signal,
so :class:`LatestValues` keeps them with their event time and drops what is older than a few collection
intervals. It lives in the worker's memory only: every value is refreshed within one interval, so it is
not worth a changelog (after a restart rules see "no news" for one interval, never wrong values).

Derived ratios (``gpu.sm_clock_ratio``) are computed on the merged view, so their two inputs may come from
different snapshots. What one snapshot brings is :func:`tailhound.streams.snapshot_scan.snapshot_values`.
"""

from __future__ import annotations

from collections.abc import Callable

from .extract import DERIVED_SIGNALS, RATE_RATIOS, SignalValues, add_ratio

#: A value is current for this many collection intervals (at least MIN_AGE_S).
STALE_INTERVALS = 3.0
MIN_AGE_S = 60.0
DEFAULT_AGE_S = 120.0


#: one signal's values: ``(ts, max_age, {entity: value})`` while every entity was last updated by the same snapshot
#: (the usual case; one tuple a signal instead of one a value, ~13 KB of a node's memory), else
#: ``{entity: (value, ts, max_age)}``
Slot = tuple[float, float, dict[str, float]] | dict[str, tuple[float, float, float]]


def _current(slot: Slot, now: float) -> dict[str, float]:
    """The values of `slot` not older than their max age at `now` (a new dict)."""
    if slot.__class__ is tuple:
        ts, age, values = slot  # type: ignore[misc]
        return dict(values) if now - ts <= age else {}
    return {e: v for e, (v, ts, age) in slot.items() if now - ts <= age}  # type: ignore[union-attr]


def _seen(slot: Slot) -> dict[str, float]:
    """entity -> the event time of its value."""
    if slot.__class__ is tuple:
        return dict.fromkeys(slot[2], slot[0])  # type: ignore[arg-type]
    return {e: ts for e, (_v, ts, _a) in slot.items()}  # type: ignore[union-attr]


class LatestValues:
    """signal -> entity -> (value, ts, max_age) for one node (kept as :data:`Slot`)."""

    def __init__(self) -> None:
        self._values: dict[str, Slot] = {}
        #: (ts, interval_s) of the last snapshot whose window statistics were stored (see SnapshotProcessor)
        self.stats_at: tuple[float, float | None] | None = None

    def update(self, values: SignalValues, ts: float, interval_s: float | None) -> None:
        max_age = max(STALE_INTERVALS * interval_s, MIN_AGE_S) if interval_s else DEFAULT_AGE_S
        stored = self._values
        for signal, per_entity in values.items():
            slot = stored.get(signal)
            if slot is None or (slot.__class__ is tuple and slot[0] <= ts and slot[2].keys() <= per_entity.keys()):  # type: ignore[union-attr]
                stored[signal] = (ts, max_age, dict(per_entity))  # every entity's value is replaced
                continue
            if slot.__class__ is tuple:  # why: an entity keeps an older value, or this snapshot is older
                old_ts, old_age, old_values = slot  # type: ignore[misc]
                slot = {e: (v, old_ts, old_age) for e, v in old_values.items()}
            elif slot.keys() <= per_entity.keys() and all(old[1] <= ts for old in slot.values()):  # type: ignore[union-attr]
                stored[signal] = (ts, max_age, dict(per_entity))  # one time again
                continue
            for entity, value in per_entity.items():
                old = slot.get(entity)  # type: ignore[union-attr]
                if old is None or old[1] <= ts:
                    slot[entity] = (value, ts, max_age)  # type: ignore[index]
            stored[signal] = slot

    def view(self, now: float) -> SignalValues:
        """Current values (not older than their max age), plus ratios derived from them."""
        out: SignalValues = {}
        for signal, slot in self._values.items():
            current = _current(slot, now)
            if current:
                out[signal] = current
        for name, (_per, (num, den)) in DERIVED_SIGNALS.items():
            add_ratio(out, name, num, den)
        for name, (num, den) in RATE_RATIOS.items():
            add_ratio(out, name, num, den)
        return out

    def current(self, now: float) -> CurrentValues:
        """:meth:`view`, computed per signal when it is first read (a step reads a few dozen signals of
        the few hundred values a node has)."""
        return CurrentValues(self, now)

    def current_of(self, signal: str, now: float) -> dict[str, float] | None:
        """The current values of one stored signal (None when none is current)."""
        slot = self._values.get(signal)
        return (_current(slot, now) or None) if slot is not None else None

    def last_seen(self) -> dict[str, dict[str, float]]:
        return {s: _seen(slot) for s, slot in self._values.items()}

    def seen(self) -> SeenTimes:
        """:meth:`last_seen`, per signal when it is read."""
        return SeenTimes(self._values)

    def forget_older_than(self, cutoff: float) -> None:
        """Drop values last seen before `cutoff` (bounded memory for entities that went away)."""
        for signal, slot in list(self._values.items()):
            if slot.__class__ is tuple:
                keep = slot[0] >= cutoff and bool(slot[2])  # type: ignore[index]
            else:
                slot = {e: t for e, t in slot.items() if t[1] >= cutoff}  # type: ignore[union-attr]
                keep = bool(slot)
            if keep:
                self._values[signal] = slot
            else:
                del self._values[signal]

    def __len__(self) -> int:
        return sum(len(slot[2]) if slot.__class__ is tuple else len(slot) for slot in self._values.values())  # type: ignore[arg-type, index]


#: derived signal -> its (numerator, denominator), in the order view() computes them (a later one wins)
_RATIOS: dict[str, tuple[str, str]] = {**{name: pair for name, (_per, pair) in DERIVED_SIGNALS.items()}, **RATE_RATIOS}
_MISSING = object()


class CurrentValues:
    """A node's :meth:`LatestValues.view` at one event time, computed per signal on first read.

    Reads as the dict view() returns (``get``, ``[]``, ``in``, iteration); a signal set with ``[]``
    replaces what it would have been, as an assignment into that dict does, and so does a non-empty
    answer of a function given with :meth:`provide` (computed when the signal is first read).
    """

    __slots__ = ("_latest", "_now", "_known", "_provided")

    def __init__(self, latest: LatestValues, now: float) -> None:
        self._latest = latest
        self._now = now
        self._known: dict[str, dict[str, float] | None] = {}
        self._provided: dict[str, Callable[[], dict[str, float] | None]] = {}

    def provide(self, signal: str, compute: Callable[[], dict[str, float] | None]) -> None:
        """`signal` is what `compute` returns, when that is not empty (asked on the first read)."""
        self._provided[signal] = compute
        self._known.pop(signal, None)

    def get(self, signal: str, default: object = None):  # as dict.get
        found = self._known.get(signal, _MISSING)
        if found is _MISSING:
            found = self._known[signal] = self._compute(signal)
        return default if found is None else found

    def _compute(self, signal: str) -> dict[str, float] | None:
        provided = self._provided.get(signal)
        if provided is not None:
            values = provided()
            if values:
                return values
        pair = _RATIOS.get(signal)
        if pair is not None:
            nums, dens = self.get(pair[0]), self.get(pair[1])
            if nums and dens:
                ratios = {e: nums[e] / dens[e] for e in nums if dens.get(e)}
                if ratios:
                    return ratios
        return self._latest.current_of(signal, self._now)

    def __getitem__(self, signal: str) -> dict[str, float]:
        found = self.get(signal)
        if found is None:
            raise KeyError(signal)
        return found

    def __setitem__(self, signal: str, values: dict[str, float]) -> None:
        self._known[signal] = values

    def __contains__(self, signal: object) -> bool:
        return isinstance(signal, str) and self.get(signal) is not None

    def to_dict(self) -> SignalValues:
        """Every signal with a current value (what view() gives, plus what was set)."""
        names = [*self._latest._values, *_RATIOS, *self._provided, *self._known]
        return {name: values for name in dict.fromkeys(names) if (values := self.get(name)) is not None}

    def __iter__(self):
        return iter(self.to_dict())

    def keys(self):
        return self.to_dict().keys()

    def items(self):
        return self.to_dict().items()


class SeenTimes:
    """:meth:`LatestValues.last_seen` read one signal at a time: ``get(signal)`` -> {entity: ts}."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Slot]) -> None:
        self._values = values

    def get(self, signal: str, default: object = None):  # as dict.get
        slot = self._values.get(signal)
        return default if slot is None else _seen(slot)
