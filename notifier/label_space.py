"""The labels incidents carry, for checking what people write against them: matchers (routes, inhibit
rules, maintenance windows, silences), grouping and inhibit ``equal`` labels, and ``routes test``'s labels.

:class:`LabelSpace` is the labels of :func:`~tailhound.notifier.matchers.incident_labels` plus every
``labels:`` key of the rule pack, with the closed value sets among them (``severity``, ``root_cause``,
``transient``, and ``rule``: the pack's rule names). The rule pack is read as plain YAML: the notifier does
not import the streams code.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from tailhound.config_errors import Problem, nearest
from tailhound.incident import IncidentEvent, Scope
from tailhound.vocabulary import RootCause, Severity
from tailhound.yamlfile import read_text as read_yaml_text
from tailhound.yamlfile import safe_load

from .matchers import Matcher, incident_labels

#: labels the streams worker puts among an incident's own labels: the names of every rule of the
#: incident (``rules``) and, for a roll-up, its nodes (``nodes``, also a scope label)
STREAMS_LABELS = ("rules", "nodes")
#: an alternative of a pattern that is a plain value (``retry-storm``), not an expression
_LITERAL = re.compile(r"[A-Za-z0-9_:-]+")
_LABELS_DOC = "see docs/notifier.md#matchers-and-incident-labels"


def fixed_labels() -> frozenset[str]:
    """The labels every incident may carry whatever the rule pack: those of
    :func:`~tailhound.notifier.matchers.incident_labels` (read from it) and :data:`STREAMS_LABELS`."""
    probe = IncidentEvent(
        incident_id="inc-probe",
        event="opened",
        sequence=1,
        ts=1.0,
        opened_at=1.0,
        root_cause=RootCause.CAPACITY,
        severity=Severity.INFO,
        rule="probe",
        scope=Scope(node="n", gpus=["0"], engine="e", model="m", endpoint="p", nodes=["n"]),
    )
    return frozenset(incident_labels(probe)) | frozenset(STREAMS_LABELS)


@dataclass(frozen=True)
class LabelSpace:
    """The labels incidents carry (`names`) and the closed value sets among them (`values`)."""

    names: frozenset[str]
    values: Mapping[str, tuple[str, ...]]
    #: where the rule pack's labels and rule names came from (None: not read)
    rules_dir: str | None = None

    def nearest_name(self, name: str) -> str | None:
        close = difflib.get_close_matches(name, sorted(self.names), n=1, cutoff=0.7)
        return close[0] if close else None

    def what(self, name: str) -> str:
        """How the values of the closed label `name` are named in a hint."""
        return f"the rule names in {self.rules_dir}" if name == "rule" and self.rules_dir else f"{name} values"


def label_space(rules: Path | None = None) -> tuple[LabelSpace, list[Problem]]:
    """The labels incidents carry: the fixed ones plus every ``labels:`` key of the rule files in `rules`
    (a directory's ``*.yaml``/``*.yml``, or one file); ``rule`` becomes a closed set of the pack's rule names
    when every file could be read. The problems: a `rules` path that does not exist."""
    names = set(fixed_labels())
    values: dict[str, tuple[str, ...]] = {
        "severity": tuple(s.value for s in Severity),
        "root_cause": tuple(r.value for r in RootCause),
        "transient": ("true", "false"),
    }
    if rules is None:
        return LabelSpace(frozenset(names), values), []
    if rules.is_dir():
        files = sorted(f for f in rules.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
    elif rules.is_file():
        files = [rules]
    else:
        return LabelSpace(frozenset(names), values), [Problem(str(rules), None, None, "no such rules directory")]
    rule_names: set[str] = set()
    complete = bool(files)
    for path in files:
        try:
            data = safe_load(read_yaml_text(path))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            complete = False  # `tailhound rules check` reports it; without its names, `rule` stays open
            continue
        groups = data.get("groups") if isinstance(data, dict) else None
        for group in groups if isinstance(groups, list) else ():
            rule_list = group.get("rules") if isinstance(group, dict) else None
            for rule in rule_list if isinstance(rule_list, list) else ():
                if not isinstance(rule, dict) or not isinstance(rule.get("name"), str):
                    complete = False
                    continue
                rule_names.add(rule["name"])
                labels = rule.get("labels")
                if isinstance(labels, dict):
                    names.update(str(k) for k in labels)
    if complete and rule_names:
        values["rule"] = tuple(sorted(rule_names))
    return LabelSpace(frozenset(names), values, str(rules)), []


@dataclass(frozen=True)
class MatcherIssue:
    """A problem of one matcher: at its label name, or at `offset` characters into its value."""

    where: str  # "name" or "value"
    offset: int
    message: str
    hint: str


def matcher_issues(m: Matcher, space: LabelSpace) -> list[MatcherIssue]:
    """What is wrong with `m` given the labels incidents carry (empty: nothing)."""
    out: list[MatcherIssue] = []
    name = m.name
    if name not in space.names:
        close = space.nearest_name(name)
        effect = "always matches" if m.matches({}) else "never matches"
        out.append(
            MatcherIssue(
                "name",
                0,
                f"no incident carries the label {name!r}, so {m} {effect}",
                f"did you mean {close!r}?" if close else _label_list(space),
            )
        )
        if close is None or close not in space.values:
            return out
        name = close  # check the value too, against the label that was meant
    values = space.values.get(name)
    if values is None:
        return out
    if m.op in ("=", "!="):
        if m.value in values or (m.op == "!=" and m.value == ""):
            return out
        effect = "never matches" if m.op == "=" else "always matches"
        what = f"{m.value!r} is not a valid {name}" if m.value else f"every incident has a {name}"
        out.append(MatcherIssue("value", 0, f"{what}, so {m} {effect}", nearest(m.value, values, space.what(name))))
        return out
    alternatives = _alternatives(m.value)
    if len(alternatives) > 1:
        for offset, alt in alternatives:
            if _matches_any(alt, values):
                continue
            what = f"{alt!r} is not a valid {name}" if _LITERAL.fullmatch(alt) else f"{alt!r} matches no valid {name}"
            out.append(
                MatcherIssue(
                    "value",
                    offset,
                    f"{what}, so that alternative of {m} never matches",
                    nearest(alt, values, space.what(name)),
                )
            )
        return out
    if not _matches_any(m.value, values):
        effect = "never matches" if m.op == "=~" else "always matches"
        out.append(
            MatcherIssue(
                "value",
                0,
                f"the pattern matches no valid {name}, so {m} {effect}",
                nearest(m.value, values, space.what(name)),
            )
        )
    return out


def _alternatives(pattern: str) -> list[tuple[int, str]]:
    """The top-level alternatives of `pattern` with their offsets (one, the whole pattern, when it has groups,
    classes or escapes, where a ``|`` may not split it at the top)."""
    if any(c in pattern for c in "()[]\\"):
        return [(0, pattern)]
    out, offset = [], 0
    for alt in pattern.split("|"):
        out.append((offset, alt))
        offset += len(alt) + 1
    return out


def _matches_any(pattern: str, values: tuple[str, ...]) -> bool:
    try:
        probe = Matcher(name="x", op="=~", value=pattern)
    except ValueError:
        return True  # not a pattern on its own: say nothing
    return any(probe.matches({"x": v}) for v in values)


def label_issues(name: str, value: str, space: LabelSpace) -> list[tuple[str, str]]:
    """(message, hint) for each problem of the label ``name=value`` on an incident (``routes test``'s
    arguments): a label no incident carries, a value outside a closed set."""
    out: list[tuple[str, str]] = []
    if name not in space.names:
        close = space.nearest_name(name)
        out.append(
            (f"no incident carries the label {name!r}", f"did you mean {close!r}?" if close else _label_list(space))
        )
        if close is None or close not in space.values:
            return out
        name = close
    values = space.values.get(name)
    if values is not None and value not in values:
        out.append((f"{value!r} is not a valid {name}", nearest(value, values, space.what(name))))
    return out


def label_name_issue(name: str, space: LabelSpace) -> str | None:
    """The hint for a label name no incident carries (None when it is known)."""
    if name in space.names:
        return None
    close = space.nearest_name(name)
    return f"did you mean {close!r}?" if close else _label_list(space)


def _label_list(space: LabelSpace) -> str:
    return nearest("", sorted(space.names), "labels", limit=24) if len(space.names) <= 24 else _LABELS_DOC
