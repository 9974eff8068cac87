"""``tailhound notifier check``: every problem of a notifier config at once, each at its line and column,
with a hint (pure; no broker), in the spirit of ``amtool check-config`` and ``tailhound rules check``.

What :func:`tailhound.notifier.config.load_config` refuses at the first error, this reports in full, and
it also finds the mistakes that load fine but change who gets paged:

- YAML syntax, and duplicate keys (YAML keeps the last one silently);
- the structure: every pydantic error at its node, unknown keys with the nearest valid key, receiver
  types with the nearest valid type;
- matchers (routes, inhibit source and target, maintenance windows) against the labels incidents
  actually carry (:class:`LabelSpace`: the labels of
  :func:`~tailhound.notifier.matchers.incident_labels` plus every ``labels:`` key of the rule pack): a
  label no incident has (``severty="critical"``), a value outside a closed set (``severity``,
  ``root_cause``, ``transient``, and ``rule``: the pack's rule names) for ``=``/``!=``, and for
  ``=~``/``!~`` a pattern that matches none of a closed label's values (or a literal alternative of it,
  ``capacity|retry-strom``, that is not one), each with the nearest valid name or value;
- ``grouping.by`` and inhibit ``equal`` labels that no incident has;
- receivers: names defined twice, routes naming a receiver that does not exist (at the route's line),
  a top-level route without a receiver;
- warnings (they do not fail the check): a route that can never be reached (an earlier sibling without
  matchers and without ``continue`` takes every incident first), matchers on the top-level route (it
  takes every incident; its matchers are never read).

The rule pack is read as plain YAML (its rule names and ``labels:`` keys): the notifier does not import
the streams code.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tailhound.config_errors import locate, validation_problem
from tailhound.errors import ConfigError
from tailhound.incident import IncidentEvent, Scope
from tailhound.problems import Problem, compose_for_check
from tailhound.vocabulary import RootCause, Severity
from tailhound.yamlfile import mapping_key as _key
from tailhound.yamlfile import mapping_value as _value
from tailhound.yamlfile import read_text as read_yaml_text
from tailhound.yamlfile import safe_load, yaml_error_text

from .config import NotifierConfig
from .matchers import _MATCHER, Matcher, incident_labels
from .receivers.registry import build_receiver

#: labels the streams worker puts among an incident's own labels: the names of every rule of the
#: incident (``rules``) and, for a roll-up, its nodes (``nodes``, also a scope label)
STREAMS_LABELS = ("rules", "nodes")
#: labels every incident has, so ``label=""`` never matches them
ALWAYS_SET = ("root_cause", "severity", "rule", "transient", "incident")
#: an alternative of a pattern that is a plain value (``retry-storm``), not an expression
_LITERAL = re.compile(r"[A-Za-z0-9_:-]+")
_RECEIVER_TYPES = ("console", "slack", "pagerduty", "webhook", "alertmanager")
_LABELS_DOC = "see docs/notifier.md#matchers-and-incident-labels"


def fixed_labels() -> frozenset[str]:
    """The labels every incident may carry whatever the rule pack: those of
    :func:`~tailhound.notifier.matchers.incident_labels` (read from it) and :data:`STREAMS_LABELS`."""
    probe = IncidentEvent(incident_id="inc-probe", event="opened", sequence=1, ts=1.0, opened_at=1.0,
                          root_cause=RootCause.CAPACITY, severity=Severity.INFO, rule="probe",
                          scope=Scope(node="n", gpus=["0"], engine="e", model="m", endpoint="p", nodes=["n"]))
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


@dataclass(frozen=True)
class WarningProblem(Problem):
    """A problem that does not fail the check (alone, the exit status stays 0)."""

    def text(self) -> str:
        return Problem(self.path, self.line, self.column, f"warning: {self.message}", self.hint).text()

    def github(self, title: str = "tailhound") -> str:
        return "::warning " + super().github(title).removeprefix("::error ")


def is_error(p: Problem) -> bool:
    return not isinstance(p, WarningProblem)


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


# --- matchers and labels, without YAML -----------------------------------------------------------------
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
        out.append(MatcherIssue("name", 0, f"no incident carries the label {name!r}, so {m} {effect}",
                                f"did you mean {close!r}?" if close else _label_list(space)))
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
        out.append(MatcherIssue("value", 0, f"{what}, so {m} {effect}", _nearest(m.value, values, space.what(name))))
        return out
    alternatives = _alternatives(m.value)
    if len(alternatives) > 1:
        for offset, alt in alternatives:
            if _matches_any(alt, values):
                continue
            what = (f"{alt!r} is not a valid {name}" if _LITERAL.fullmatch(alt)
                    else f"{alt!r} matches no valid {name}")
            out.append(MatcherIssue("value", offset, f"{what}, so that alternative of {m} never matches",
                                    _nearest(alt, values, space.what(name))))
        return out
    if not _matches_any(m.value, values):
        effect = "never matches" if m.op == "=~" else "always matches"
        out.append(MatcherIssue("value", 0, f"the pattern matches no valid {name}, so {m} {effect}",
                                _nearest(m.value, values, space.what(name))))
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
        out.append((f"no incident carries the label {name!r}", f"did you mean {close!r}?" if close
                    else _label_list(space)))
        if close is None or close not in space.values:
            return out
        name = close
    values = space.values.get(name)
    if values is not None and value not in values:
        out.append((f"{value!r} is not a valid {name}", _nearest(value, values, space.what(name))))
    return out


def label_name_issue(name: str, space: LabelSpace) -> str | None:
    """The hint for a label name no incident carries (None when it is known)."""
    if name in space.names:
        return None
    close = space.nearest_name(name)
    return f"did you mean {close!r}?" if close else _label_list(space)


# --- checking a file -------------------------------------------------------------------------------------
@dataclass
class CheckedFile:
    """One config file checked: its problems, and the config when it is valid."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    config: NotifierConfig | None = None
    node: yaml.Node | None = None
    missing: bool = False


def check_file(path: Path, space: LabelSpace) -> CheckedFile:
    if not path.exists():
        return CheckedFile(str(path), [Problem(str(path), None, None, "no such file")], missing=True)
    if path.is_dir():
        return CheckedFile(str(path), [Problem(str(path), None, None, "a directory, not a notifier config file")])
    try:
        text = read_yaml_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        return CheckedFile(str(path), [Problem(str(path), None, None, f"cannot read: {exc}")])
    except yaml.YAMLError as exc:  # over the size limit
        return CheckedFile(str(path), [Problem(str(path), None, None, yaml_error_text(exc))])
    return check_text(text, str(path), space)


def check_text(text: str, origin: str, space: LabelSpace) -> CheckedFile:
    """Every problem of one notifier config (sorted by line and column)."""
    node, data, problems, parsed = compose_for_check(text, origin)
    if not parsed:
        return CheckedFile(origin, problems)
    if data is None:
        data, node = {}, None
    if not isinstance(data, dict) or (node is not None and not isinstance(node, yaml.MappingNode)):
        return CheckedFile(origin, [*problems, Problem(origin, 1, 1, "a notifier config is a mapping (grouping, "
                                                                   "route, receivers, inhibit_rules, ...)")])
    checker = _Semantic(origin, text, space, node)
    semantic = checker.check(data) if node is not None else []
    config = None
    try:
        config = NotifierConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            if not err["loc"] and checker.receiver_problems:
                continue  # the model's receiver check: reported at the route or receiver's own line
            problems.append(_validation_problem(err, node, origin))
    problems += semantic
    problems.sort(key=lambda p: (p.line or 0, p.column or 0))
    return CheckedFile(origin, problems, config if not any(map(is_error, problems)) else None, node)


def check_secrets(checked: CheckedFile, allowed_hosts: list[str], environ: dict[str, str] | None = None
                  ) -> list[Problem]:
    """What the worker does at start: resolve every receiver's secrets and check its URLs against the
    allow-list; each failure at its receiver's line."""
    if checked.config is None:
        return []
    items = _value(checked.node, "receivers")
    out: list[Problem] = []
    for i, rc in enumerate(checked.config.receivers):
        try:
            build_receiver(rc, allowed_hosts=allowed_hosts, environ=environ)
        except ConfigError as exc:
            at = items.value[i] if isinstance(items, yaml.SequenceNode) and i < len(items.value) else None
            out.append(_at(checked.path, at, str(exc)) if at is not None else Problem(checked.path, None, None,
                                                                                       str(exc)))
    return out


# --- structure: pydantic's errors at their nodes (the one config error formatter) ---------------------------
def _validation_problem(err: Any, node: yaml.Node | None, origin: str) -> Problem:
    problem = validation_problem(err, node, origin, NotifierConfig)
    kind = err["type"]
    if kind == "union_tag_invalid":
        return replace(problem, message=problem.message.replace("unknown type", "unknown receiver type"),
                       hint=problem.hint.replace("types:", "receiver types:"))
    if kind == "union_tag_not_found":
        return replace(problem, hint=f"receiver types: {', '.join(_RECEIVER_TYPES)}")
    target, _, _ = locate(node, list(err["loc"]))
    ends = _value(target, "ends_at")
    if problem.message.endswith("ends_at must be after starts_at") and ends is not None:
        return replace(problem, line=ends.start_mark.line + 1, column=ends.start_mark.column + 1)
    return problem


# --- meaning: labels, values, receivers, reachability ---------------------------------------------------
class _Semantic:
    def __init__(self, origin: str, text: str, space: LabelSpace, root: yaml.Node | None) -> None:
        self.origin, self.text, self.space, self.root = origin, text, space, root
        self.out: list[Problem] = []
        #: problems of what the model's own receiver check refuses (names twice, unknown, no default)
        self.receiver_problems = 0

    def check(self, data: dict) -> list[Problem]:
        names = self._receivers(data)
        route, route_node = data.get("route"), _value(self.root, "route")
        if "route" not in data:
            if names is not None and "console" not in names:
                at = _key(self.root, "receivers") or self.root
                self._add(at, "no `route:`: the default route sends everything to receiver 'console', which is "
                              "not among the receivers", "add `route: {receiver: <name>}`", receiver=True)
        elif isinstance(route, dict) and isinstance(route_node, yaml.MappingNode):
            if not route.get("receiver"):
                self._add(_key(self.root, "route") or route_node,
                          "route: the top-level route needs a receiver (the default for unmatched incidents)",
                          _nearest("", sorted(set(names or [])), "receivers") if names else "", receiver=True)
            top_matchers = _value(route_node, "matchers")
            if isinstance(route.get("matchers"), list) and route["matchers"] and top_matchers is not None:
                self._add(top_matchers, "route.matchers: the top-level route takes every incident; its matchers "
                                        "are never read", "move them to a child route under `routes:`",
                          warning=True)
            self._route(route, route_node, "route", names)
        self._label_list(data, ("grouping", "by"), "it is \"\" on every incident, so it never splits a group")
        for i, (rule, rule_node) in enumerate(self._items(data, "inhibit_rules")):
            for key in ("source_matchers", "target_matchers"):
                self._matchers(rule.get(key), _value(rule_node, key), f"inhibit_rules[{i}].{key}")
            self._labels(rule.get("equal"), _value(rule_node, "equal"), f"inhibit_rules[{i}].equal",
                         "it is \"\" on every incident, so it is always equal")
        for i, (window, window_node) in enumerate(self._items(data, "maintenance")):
            self._matchers(window.get("matchers"), _value(window_node, "matchers"), f"maintenance[{i}].matchers")
        return self.out

    # receivers
    def _receivers(self, data: dict) -> list[str] | None:
        """The receiver names (None: the receivers are not a list; the structure check says so)."""
        if "receivers" not in data:
            return ["console"]
        items = self._items(data, "receivers")
        if not isinstance(data["receivers"], list):
            return None
        names: list[str] = []
        first: dict[str, yaml.Node] = {}
        for i, (rc, rc_node) in enumerate(items):
            name, name_node = rc.get("name"), _value(rc_node, "name")
            if not isinstance(name, str) or name_node is None:
                continue
            if name in first:
                self._add(name_node, f"receivers[{i}].name: receiver {name!r} is defined twice",
                          f"first at line {first[name].start_mark.line + 1}", receiver=True)
            else:
                first[name] = name_node
            names.append(name)
        return names

    def _route(self, route: dict, node: yaml.MappingNode, where: str, names: list[str] | None) -> None:
        receiver, receiver_node = route.get("receiver"), _value(node, "receiver")
        if isinstance(receiver, str) and names is not None and receiver not in names and receiver_node is not None:
            self._add(receiver_node, f"{where}.receiver: no receiver named {receiver!r}",
                      _nearest(receiver, sorted(set(names)), "receivers"), receiver=True)
        if where != "route":
            self._matchers(route.get("matchers"), _value(node, "matchers"), f"{where}.matchers")
        children, children_node = route.get("routes"), _value(node, "routes")
        if not isinstance(children, list) or not isinstance(children_node, yaml.SequenceNode):
            return
        catch_all: tuple[str, int] | None = None
        for i, (child, child_node) in enumerate(zip(children, children_node.value, strict=False)):
            if not isinstance(child, dict) or not isinstance(child_node, yaml.MappingNode):
                continue
            path = f"{where}.routes[{i}]"
            if catch_all is not None:
                self._add(child_node, f"{path}: never reached: {catch_all[0]} (line {catch_all[1]}) has no matchers "
                                      "and no `continue: true`, so it takes every incident first",
                          "move the catch-all route last, or give it matchers or `continue: true`", warning=True)
            elif not child.get("matchers") and child.get("continue") is not True:
                catch_all = (path, child_node.start_mark.line + 1)
            self._route(child, child_node, path, names)

    # labels and matchers
    def _label_list(self, data: dict, keys: tuple[str, str], effect: str) -> None:
        outer, outer_node = data.get(keys[0]), _value(self.root, keys[0])
        if isinstance(outer, dict):
            self._labels(outer.get(keys[1]), _value(outer_node, keys[1]), ".".join(keys), effect)

    def _labels(self, values: object, node: yaml.Node | None, where: str, effect: str) -> None:
        if not isinstance(values, list) or not isinstance(node, yaml.SequenceNode):
            return
        for i, (name, item) in enumerate(zip(values, node.value, strict=False)):
            if isinstance(name, str) and (hint := label_name_issue(name, self.space)) is not None:
                self._add(item, f"{where}[{i}]: no incident carries the label {name!r} ({effect})", hint)

    def _matchers(self, values: object, node: yaml.Node | None, where: str) -> None:
        if not isinstance(values, list) or not isinstance(node, yaml.SequenceNode):
            return
        for i, (value, item) in enumerate(zip(values, node.value, strict=False)):
            try:
                m = Matcher.parse(value) if isinstance(value, str) else Matcher.model_validate(value)
            except (ValueError, TypeError):
                continue  # the structure check reports it
            for issue in matcher_issues(m, self.space):
                line, col = self._matcher_position(item, issue)
                self.out.append(Problem(self.origin, line, col, f"{where}[{i}]: {issue.message}", issue.hint))

    def _matcher_position(self, item: yaml.Node, issue: MatcherIssue) -> tuple[int, int]:
        """Line and column of the matcher's label name or value (its first character when the source does not
        hold the text verbatim: escapes, several lines)."""
        line, col = item.start_mark.line + 1, item.start_mark.column + 1
        if isinstance(item, yaml.MappingNode):  # {name: ..., op: ..., value: ...}
            part = _value(item, issue.where)
            return (part.start_mark.line + 1, part.start_mark.column + 1) if part is not None else (line, col)
        if not isinstance(item, yaml.ScalarNode):
            return line, col
        start = _verbatim_start(item, self.text)
        m = _MATCHER.match(item.value)
        if start is None or m is None:
            return line, col
        if issue.where == "name":
            return line, start + m.start(1) + 1
        group = 3 if m.group(3) is not None else 4
        offset = issue.offset if "\\" not in m.group(group) else 0
        return line, start + m.start(group) + offset + 1

    # helpers
    def _items(self, data: dict, key: str) -> Iterator[tuple[dict, yaml.Node]]:
        values, node = data.get(key), _value(self.root, key)
        if isinstance(values, list) and isinstance(node, yaml.SequenceNode):
            for value, item in zip(values, node.value, strict=False):
                if isinstance(value, dict) and isinstance(item, yaml.MappingNode):
                    yield value, item

    def _add(self, node: yaml.Node, message: str, hint: str = "", warning: bool = False,
             receiver: bool = False) -> None:
        self.receiver_problems += receiver
        cls = WarningProblem if warning else Problem
        self.out.append(cls(self.origin, node.start_mark.line + 1, node.start_mark.column + 1, message, hint))


def _verbatim_start(node: yaml.ScalarNode, text: str) -> int | None:
    """0-based column of the scalar's first character of content when the source holds its value verbatim
    (one line, no YAML escapes)."""
    s, e = node.start_mark, node.end_mark
    if s.line != e.line:
        return None
    raw = text[s.index:e.index]
    quoted = node.style in ("'", '"')
    if quoted:
        raw = raw[1:-1]
    return s.column + int(quoted) if raw == node.value else None


# --- small YAML helpers -----------------------------------------------------------------------------------


def _at(origin: str, node: yaml.Node, message: str, hint: str = "") -> Problem:
    return Problem(origin, node.start_mark.line + 1, node.start_mark.column + 1, message, hint)


def _label_list(space: LabelSpace) -> str:
    return _nearest("", sorted(space.names), "labels", limit=24) if len(space.names) <= 24 else _LABELS_DOC


def _nearest(word: str, choices: list[str] | tuple[str, ...] | set[str], what: str, limit: int = 16) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7) if word else []
    if close:
        return f"did you mean {close[0]!r}?"
    listed = sorted(choices)
    return f"{what}: {', '.join(listed)}" if listed and len(listed) <= limit else what
