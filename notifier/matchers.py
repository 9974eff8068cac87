"""Label matchers in Alertmanager's syntax: ``root_cause="capacity"``, ``severity=~"warning|critical"``,
``node!="gpu-node-7"``, ``model!~"batch-.*"``.

Routes, inhibit rules and silences all select incidents with them. An incident's labels for matching
are :func:`incident_labels`: its own ``labels`` plus ``root_cause``, ``severity``, ``rule``,
``transient`` (``"true"``/``"false"``), ``incident`` (its id) and the scope's ``node``, ``gpus``,
``engine``, ``model`` and ``endpoint``. A label that is not there matches as the empty string, as in
Prometheus (``node=""`` selects incidents without a node).

Regular expressions are RE2 (the ``google-re2`` package), as in Alertmanager and Prometheus, and fully
anchored: ``node=~"gpu-node-.*"`` must match the whole value. RE2 matches in time linear in the input,
so no pattern, however hostile (``(.|.)*Z``), can pin the event loop; the price is that RE2 has no
backreferences or lookaround, and such a pattern is refused when the matcher is parsed, naming it.
A matcher's value is at most :data:`MAX_VALUE_CHARS` characters.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Annotated, Literal

import re2
from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, PrivateAttr, model_validator

from tailhound.incident import IncidentEvent

Op = Literal["=", "!=", "=~", "!~"]
# linear: the alternatives inside the quotes never overlap, so a failed match does not backtrack
_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]*))\s*$')

#: longest matcher value (a label value or a regular expression), in characters
MAX_VALUE_CHARS = 1024
#: longest matcher text handed to :meth:`Matcher.parse` (name, operator, quotes and escapes included)
MAX_TEXT_CHARS = 2 * MAX_VALUE_CHARS + 256
#: memory budget of one compiled expression: RE2 refuses to compile a pattern that needs more, and its
#: lazy DFA falls back to the slower, still linear, NFA when its share runs out. 256 KiB keeps 2,000
#: hostile 1 KiB patterns under 80 MB (with 1 MiB their DFA caches grow to 700 MB).
RE2_MAX_MEM = 256 * 1024
#: compiled expressions kept (routes, inhibit rules and silences rarely use more than a few hundred)
COMPILED_CACHE_SIZE = 4096

_OPTIONS = re2.Options()
_OPTIONS.max_mem = RE2_MAX_MEM
_OPTIONS.never_capture = True  # only "does it match"; no submatch bookkeeping
_OPTIONS.log_errors = False  # the error goes into our message, not to stderr


class RegexError(ValueError):
    """A pattern RE2 cannot compile (backreferences, lookaround, a bad escape, too large)."""


class _Compiled:
    """One compiled RE2 expression that answers "does it match all of `text`". It calls the C++ matcher
    directly when the binding exposes it (google-re2 1.x does): the module's generic ``fullmatch`` builds
    match objects and offset tables, 3-4x the cost of the match itself, which adds up over a thousand
    silences."""

    __slots__ = ("_raw", "_rx")

    _ANCHOR = getattr(getattr(re2, "_Anchor", None), "ANCHOR_BOTH", None)
    _NO_MATCH = getattr(re2, "_NULL_SPAN", None)

    def __init__(self, rx: object) -> None:
        self._rx = rx
        raw = getattr(rx, "_regexp", None)
        self._raw = raw if raw is not None and self._ANCHOR is not None and self._NO_MATCH is not None else None

    @property
    def program_size(self) -> int:
        size = getattr(getattr(self._rx, "_regexp", None), "ProgramSize", None)
        return int(size()) if size is not None else 0

    def fullmatch(self, text: str) -> bool:
        if self._raw is None:
            return self._rx.fullmatch(text) is not None  # type: ignore[attr-defined]
        data = text.encode("utf-8", "surrogatepass")
        return self._raw.Match(self._ANCHOR, data, 0, len(data))[0] != self._NO_MATCH


@functools.lru_cache(maxsize=COMPILED_CACHE_SIZE)
def _compiled(pattern: str) -> _Compiled:
    """`pattern` compiled by RE2 (cached); :class:`RegexError` when RE2 refuses it."""
    try:
        return _Compiled(re2.compile(pattern, _OPTIONS))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise RegexError(str(reason)) from None


class Matcher(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    op: Op
    value: str
    #: the compiled expression, held by the matcher (a silence matches with its own, whatever the cache holds)
    _rx: _Compiled | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_value(self) -> Matcher:
        # also here, not only in parse(): a matcher given as an object ({name, op, value}) is checked too
        self._rx = _check(self.name, self.op, self.value)
        return self

    @property
    def program_size(self) -> int:
        """RE2 instructions of the expression (0 for = and !=): what matching it costs, and its memory."""
        return self._rx.program_size if self._rx is not None else 0

    @classmethod
    def parse(cls, text: str) -> Matcher:
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"invalid matcher {text[:40]!r}...: {len(text)} characters, more than {MAX_TEXT_CHARS}")
        m = _MATCHER.match(text)
        if not m:
            raise ValueError(f'invalid matcher {text!r}: write name="value" (operators = != =~ !~)')
        value = m.group(3) if m.group(3) is not None else m.group(4)
        value = re.sub(r"\\(.)", r"\1", value)
        _check(m.group(1), m.group(2), value)  # a plain ValueError naming the matcher, not pydantic's wrapping
        return cls(name=m.group(1), op=m.group(2), value=value)  # type: ignore[arg-type]

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.name, "")
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        rx = self._rx if self._rx is not None else _compiled(self.value)
        hit = rx.fullmatch(have)
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{self.op}"{escaped}"'


@dataclass(frozen=True)
class MatcherSpans:
    """Where the parts of a matcher's text start (0-based offsets into it), for pointing at one of them."""

    name: int
    #: the value's first character (inside the quotes when it is quoted)
    value: int
    #: the value as written: backslash escapes not undone
    raw_value: str


def matcher_spans(text: str) -> MatcherSpans | None:
    """The spans of `text` in the syntax :meth:`Matcher.parse` reads (None: not in that syntax)."""
    m = _MATCHER.match(text) if len(text) <= MAX_TEXT_CHARS else None
    if m is None:
        return None
    group = 3 if m.group(3) is not None else 4
    return MatcherSpans(name=m.start(1), value=m.start(group), raw_value=m.group(group))


def _check(name: str, op: str, value: str) -> _Compiled | None:
    """The compiled expression of a regex matcher (None for = and !=); ValueError naming the matcher."""
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(
            f'matcher {name}{op}"{value[:40]}...": the value has {len(value)} characters, more than {MAX_VALUE_CHARS}'
        )
    if op in ("=~", "!~"):
        try:
            return _compiled(value)
        except RegexError as exc:
            shown = value.replace("\\", "\\\\").replace('"', '\\"')
            raise ValueError(
                f'invalid regular expression in matcher {name}{op}"{shown}": {exc} (matchers use '
                "RE2 syntax, as Alertmanager: no backreferences or lookaround)"
            ) from None
    return None


def _to_matcher(v: object) -> object:
    return Matcher.parse(v) if isinstance(v, str) else v


#: A matcher written as a string in YAML (``'severity="critical"'``), kept as a string when dumped.
MatcherField = Annotated[Matcher, BeforeValidator(_to_matcher), PlainSerializer(str, return_type=str)]


def matches_all(matchers: list[Matcher], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def incident_labels(ev: IncidentEvent) -> dict[str, str]:
    """The label set routes, inhibit rules and silences match an incident on."""
    out = dict(ev.labels)
    out.update(
        root_cause=str(ev.root_cause),
        severity=str(ev.severity),
        rule=ev.rule,
        transient="true" if ev.transient else "false",
        incident=ev.incident_id,
    )
    out.update(ev.scope.labels())
    return out
