"""The one validator of notifier configs: every problem at once, each at its line and column with a hint,
used by the loader (:func:`tailhound.notifier.config.load_config`, what the notifier runs with) and by
``tailhound notifier check`` / ``tailhound check``, as amtool checks with Alertmanager's own loader.

It reports YAML syntax and duplicate keys, every error of the models (:class:`NotifierConfig` and its
parts, through the one formatter :mod:`tailhound.config_errors`), the receiver rules
(:mod:`tailhound.notifier.receiver_names`, found even when other parts do not validate), and warnings that
do not fail it: a route that can never be reached, matchers on the top-level route. Given a
:class:`~tailhound.notifier.label_space.LabelSpace` (the check commands read the rule pack) it also checks
matchers, ``grouping.by`` and inhibit ``equal`` labels against the labels incidents carry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tailhound.config_errors import locate, validation_problem
from tailhound.errors import ConfigError, ConfigFileError
from tailhound.problems import Problem, at, compose_for_check
from tailhound.yamlfile import file_error, read_config_text, yaml_error_text
from tailhound.yamlfile import mapping_value as _value
from tailhound.yamlfile import read_text as read_yaml_text

from .config import RECEIVER_ERROR, NotifierConfig
from .label_space import (
    STREAMS_LABELS,
    LabelSpace,
    MatcherIssue,
    fixed_labels,
    label_issues,
    label_name_issue,
    label_space,
    matcher_issues,
)
from .matchers import Matcher, matcher_spans
from .receiver_names import ReceiverIssue, receiver_issues
from .receivers.registry import RECEIVER_TYPES, build_receiver

__all__ = ["STREAMS_LABELS", "CheckedFile", "LabelSpace", "MatcherIssue", "WarningProblem", "check_file",
           "check_secrets", "check_text", "fixed_labels", "is_error", "label_issues", "label_space",
           "load_checked", "matcher_issues", "parse_checked"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarningProblem(Problem):
    """A problem that does not fail the check (alone, the exit status stays 0)."""

    def text(self) -> str:
        return Problem(self.path, self.line, self.column, f"warning: {self.message}", self.hint).text()

    def github(self, title: str = "tailhound") -> str:
        return "::warning " + super().github(title).removeprefix("::error ")


def is_error(p: Problem) -> bool:
    return not isinstance(p, WarningProblem)


@dataclass
class CheckedFile:
    """One config file checked: its problems, and the config when it is valid."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    config: NotifierConfig | None = None
    node: yaml.Node | None = None
    missing: bool = False


# --- loading: what the notifier runs with --------------------------------------------------------------------
def load_checked(path: str | Path) -> NotifierConfig:
    """The config in the file at `path`; a :class:`ConfigFileError` with every error (warnings are logged)."""
    p = Path(path)
    return parse_checked(read_config_text(p, ConfigFileError), str(p))


def parse_checked(text: str, origin: str) -> NotifierConfig:
    checked = check_text(text, origin, None)
    errors = [p for p in checked.problems if is_error(p)]
    if errors or checked.config is None:
        raise file_error(origin, errors or checked.problems)
    for p in checked.problems:
        logger.warning("notifier config: %s", p.text())
    return checked.config


# --- checking: every problem -----------------------------------------------------------------------------------
def check_file(path: Path, space: LabelSpace | None) -> CheckedFile:
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


def check_text(text: str, origin: str, space: LabelSpace | None) -> CheckedFile:
    """Every problem of one notifier config (sorted by line and column); labels are checked against `space`
    (None: not checked)."""
    node, data, problems, parsed = compose_for_check(text, origin)
    if not parsed:
        return CheckedFile(origin, problems)
    if data is None:
        data, node = {}, None
    if not isinstance(data, dict) or (node is not None and not isinstance(node, yaml.MappingNode)):
        return CheckedFile(origin, [*problems, Problem(origin, 1, 1, "a notifier config is a mapping (grouping, "
                                                                   "route, receivers, inhibit_rules, ...)")])
    if node is not None:
        problems += _Semantic(origin, text, space, node).check(data)
        problems += [_receiver_problem(issue, node, origin) for issue in receiver_issues(data)]
    config = None
    try:
        config = NotifierConfig.model_validate(data)
    except ValidationError as exc:
        # the receiver rules were applied to the raw file above, each at its line
        problems += [_validation_problem(err, node, origin) for err in exc.errors() if err["type"] != RECEIVER_ERROR]
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
            item = items.value[i] if isinstance(items, yaml.SequenceNode) and i < len(items.value) else None
            out.append(at(checked.path, item, str(exc)) if item is not None else Problem(checked.path, None, None,
                                                                                       str(exc)))
    return out


def _validation_problem(err: Any, node: yaml.Node | None, origin: str) -> Problem:
    """A model error at its node, through the one formatter; receiver types named as such."""
    problem = validation_problem(err, node, origin, NotifierConfig)
    kind = err["type"]
    if kind == "union_tag_invalid":
        return replace(problem, message=problem.message.replace("unknown type", "unknown receiver type"),
                       hint=problem.hint.replace("types:", "receiver types:"))
    if kind == "union_tag_not_found":
        return replace(problem, hint=f"receiver types: {', '.join(RECEIVER_TYPES)}")
    target, _, _ = locate(node, list(err["loc"]))
    ends = _value(target, "ends_at")
    if problem.message.endswith("ends_at must be after starts_at") and ends is not None:
        return replace(problem, line=ends.start_mark.line + 1, column=ends.start_mark.column + 1)
    return problem


def _receiver_problem(issue: ReceiverIssue, root: yaml.Node, origin: str) -> Problem:
    target, key_node, _ = locate(root, list(issue.loc))
    hint = issue.hint
    if issue.first is not None and (first := locate(root, list(issue.first))[0]) is not None:
        hint = f"first at line {first.start_mark.line + 1}"
    return at(origin, (key_node if issue.at_key else target) or root, issue.message, hint)


class _Semantic:
    """What loads fine but changes who gets paged: labels and matchers against the label space (when one is
    given), routes that can never be reached, matchers on the top-level route."""

    def __init__(self, origin: str, text: str, space: LabelSpace | None, root: yaml.Node) -> None:
        self.origin, self.text, self.space, self.root = origin, text, space, root
        self.out: list[Problem] = []

    def check(self, data: dict) -> list[Problem]:
        route, route_node = data.get("route"), _value(self.root, "route")
        if isinstance(route, dict) and isinstance(route_node, yaml.MappingNode):
            top_matchers = _value(route_node, "matchers")
            if isinstance(route.get("matchers"), list) and route["matchers"] and top_matchers is not None:
                self._add(top_matchers, "route.matchers: the top-level route takes every incident; its matchers "
                                        "are never read", "move them to a child route under `routes:`",
                          warning=True)
            self._route(route, route_node, "route")
        self._label_list(data, ("grouping", "by"), "it is \"\" on every incident, so it never splits a group")
        for i, (rule, rule_node) in enumerate(self._items(data, "inhibit_rules")):
            for key in ("source_matchers", "target_matchers"):
                self._matchers(rule.get(key), _value(rule_node, key), f"inhibit_rules[{i}].{key}")
            self._labels(rule.get("equal"), _value(rule_node, "equal"), f"inhibit_rules[{i}].equal",
                         "it is \"\" on every incident, so it is always equal")
        for i, (window, window_node) in enumerate(self._items(data, "maintenance")):
            self._matchers(window.get("matchers"), _value(window_node, "matchers"), f"maintenance[{i}].matchers")
        return self.out

    def _route(self, route: dict, node: yaml.MappingNode, where: str) -> None:
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
            self._route(child, child_node, path)

    # labels and matchers
    def _label_list(self, data: dict, keys: tuple[str, str], effect: str) -> None:
        outer, outer_node = data.get(keys[0]), _value(self.root, keys[0])
        if isinstance(outer, dict):
            self._labels(outer.get(keys[1]), _value(outer_node, keys[1]), ".".join(keys), effect)

    def _labels(self, values: object, node: yaml.Node | None, where: str, effect: str) -> None:
        if self.space is None or not isinstance(values, list) or not isinstance(node, yaml.SequenceNode):
            return
        for i, (name, item) in enumerate(zip(values, node.value, strict=False)):
            if isinstance(name, str) and (hint := label_name_issue(name, self.space)) is not None:
                self._add(item, f"{where}[{i}]: no incident carries the label {name!r} ({effect})", hint)

    def _matchers(self, values: object, node: yaml.Node | None, where: str) -> None:
        if self.space is None or not isinstance(values, list) or not isinstance(node, yaml.SequenceNode):
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
        spans = matcher_spans(item.value)
        if start is None or spans is None:
            return line, col
        if issue.where == "name":
            return line, start + spans.name + 1
        offset = issue.offset if "\\" not in spans.raw_value else 0
        return line, start + spans.value + offset + 1

    # helpers
    def _items(self, data: dict, key: str) -> Iterator[tuple[dict, yaml.Node]]:
        values, node = data.get(key), _value(self.root, key)
        if isinstance(values, list) and isinstance(node, yaml.SequenceNode):
            for value, item in zip(values, node.value, strict=False):
                if isinstance(value, dict) and isinstance(item, yaml.MappingNode):
                    yield value, item

    def _add(self, node: yaml.Node, message: str, hint: str = "", warning: bool = False) -> None:
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


