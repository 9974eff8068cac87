"""Label matchers in Alertmanager's syntax: ``root_cause="capacity"``, ``severity=~"warning|critical"``,
``node!="gpu-node-7"``, ``model!~"batch-.*"``.

Routes, inhibit rules and silences all select incidents with them. An incident's labels for matching
are :func:`incident_labels`: its own ``labels`` plus ``root_cause``, ``severity``, ``rule``,
``transient`` (``"true"``/``"false"``), ``incident`` (its id) and the scope's ``node``, ``gpus``,
``engine``, ``model`` and ``endpoint``. A label that is not there matches as the empty string, as in
Prometheus (``node=""`` selects incidents without a node).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer

from tailhound.incident import IncidentEvent

Op = Literal["=", "!=", "=~", "!~"]
_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]*))\s*$')


class Matcher(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    op: Op
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        m = _MATCHER.match(text)
        if not m:
            raise ValueError(f"invalid matcher {text!r}: write name=\"value\" (operators = != =~ !~)")
        value = m.group(3) if m.group(3) is not None else m.group(4)
        value = re.sub(r"\\(.)", r"\1", value)
        matcher = cls(name=m.group(1), op=m.group(2), value=value)  # type: ignore[arg-type]
        if matcher.op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression in matcher {text!r}: {exc}") from exc
        return matcher

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.name, "")
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        hit = _compiled(self.value).fullmatch(have) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{self.op}"{escaped}"'


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    rx = _CACHE.get(pattern)
    if rx is None:
        rx = _CACHE[pattern] = re.compile(pattern)
    return rx


def _to_matcher(v: object) -> object:
    return Matcher.parse(v) if isinstance(v, str) else v


#: A matcher written as a string in YAML (``'severity="critical"'``), kept as a string when dumped.
MatcherField = Annotated[Matcher, BeforeValidator(_to_matcher), PlainSerializer(str, return_type=str)]


def matches_all(matchers: list[Matcher], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def incident_labels(ev: IncidentEvent) -> dict[str, str]:
    """The label set routes, inhibit rules and silences match an incident on."""
    out = dict(ev.labels)
    out.update(root_cause=str(ev.root_cause), severity=str(ev.severity), rule=ev.rule,
               transient="true" if ev.transient else "false", incident=ev.incident_id)
    scope = ev.scope
    for name in ("node", "engine", "model", "endpoint"):
        value = getattr(scope, name)
        if value:
            out[name] = value
    if scope.gpus:
        out["gpus"] = ",".join(scope.gpus)
    if scope.nodes:
        out["nodes"] = ",".join(scope.nodes)
    return out
