"""What loads fine but changes who gets paged, as warnings and label problems of a notifier config: routes
that can never be reached and matchers on the top-level route (warnings: they do not fail a check), and,
given the labels incidents carry (:class:`~tailhound.notifier.label_space.LabelSpace`), matchers,
``grouping.by`` and inhibit ``equal`` labels that name a label no incident has or a value outside a closed
set, each at the label name or value it is about.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import yaml

from tailhound.config_errors import Problem
from tailhound.yamlfile import mapping_value as _value

from .label_space import LabelSpace, MatcherIssue, label_name_issue, matcher_issues
from .matchers import Matcher, matcher_spans


@dataclass(frozen=True)
class WarningProblem(Problem):
    """A problem that does not fail the check (alone, the exit status stays 0)."""

    def text(self) -> str:
        return Problem(self.path, self.line, self.column, f"warning: {self.message}", self.hint).text()

    def github(self, title: str = "tailhound") -> str:
        return "::warning " + super().github(title).removeprefix("::error ")


def is_error(p: Problem) -> bool:
    return not isinstance(p, WarningProblem)


def lint(origin: str, text: str, space: LabelSpace | None, root: yaml.Node, data: dict) -> list[Problem]:
    """The warnings of the config `data` (composed from `root`, the YAML of `text`) and, with `space`, its
    label problems."""
    return _Semantic(origin, text, space, root).check(data)


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
                self._add(
                    top_matchers,
                    "route.matchers: the top-level route takes every incident; its matchers are never read",
                    "move them to a child route under `routes:`",
                    warning=True,
                )
            self._route(route, route_node, "route")
        self._label_list(data, ("grouping", "by"), 'it is "" on every incident, so it never splits a group')
        for i, (rule, rule_node) in enumerate(self._items(data, "inhibit_rules")):
            for key in ("source_matchers", "target_matchers"):
                self._matchers(rule.get(key), _value(rule_node, key), f"inhibit_rules[{i}].{key}")
            self._labels(
                rule.get("equal"),
                _value(rule_node, "equal"),
                f"inhibit_rules[{i}].equal",
                'it is "" on every incident, so it is always equal',
            )
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
                self._add(
                    child_node,
                    f"{path}: never reached: {catch_all[0]} (line {catch_all[1]}) has no matchers "
                    "and no `continue: true`, so it takes every incident first",
                    "move the catch-all route last, or give it matchers or `continue: true`",
                    warning=True,
                )
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
    raw = text[s.index : e.index]
    quoted = node.style in ("'", '"')
    if quoted:
        raw = raw[1:-1]
    return s.column + int(quoted) if raw == node.value else None
