"""``tailhound notifier routes test``: which routes of the tree a label set takes and which receivers get
it, like ``amtool config routes test``; each route with its line in the file and its matchers.

:func:`trace` walks the tree exactly as :func:`tailhound.notifier.stages.route.receivers_for` does (the
first child whose matchers all match takes the incident, ``continue: true`` lets later siblings take it
too, a route none of whose children match delivers to its own receiver, inherited from its parent when
not set) and also records the path to each receiver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from tailhound.incident import IncidentEvent
from tailhound.yamlfile import compose_strict
from tailhound.yamlfile import mapping_key as _key
from tailhound.yamlfile import mapping_value as _value
from tailhound.yamlfile import read_text as read_yaml_text

from .config import NotifierConfig, Route
from .matchers import matches_all


@dataclass(frozen=True)
class RouteNode:
    """A route of the tree with where it is written."""

    route: Route
    #: ``route``, ``route.routes[0]``, ``route.routes[0].routes[2]``
    path: str
    #: the line of the route in the file (None: not written there, the built-in default)
    line: int | None
    children: tuple[RouteNode, ...] = ()

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def describe(self) -> str:
        """``routes[0] {severity="critical"} (line 40, continue)``."""
        parts = [self.name]
        if self.path != "route":
            parts.append("{" + ", ".join(map(str, self.route.matchers)) + "}")
        notes = [f"line {self.line}"] if self.line is not None else []
        if self.route.continue_:
            notes.append("continue")
        return " ".join(parts) + (f" ({', '.join(notes)})" if notes else "")


@dataclass(frozen=True)
class RoutePath:
    """The routes from the top to the one that delivers, and the receiver it delivers to."""

    steps: tuple[RouteNode, ...]
    receiver: str
    #: the delivering route has no receiver of its own; it is its parent's
    inherited: bool

    def describe(self) -> str:
        own = " (inherited)" if self.inherited else ""
        return " > ".join(s.describe() for s in self.steps) + f" -> {self.receiver}{own}"


def route_tree(config: NotifierConfig, node: yaml.Node | None) -> RouteNode:
    """The routing tree of `config`, each route with its line in the YAML `node` tree of the file."""
    route_node = _value(node, "route")
    return _build(config.route, route_node, "route", _key(node, "route"))


def load_tree(path: Path) -> RouteNode:
    """The routing tree of a notifier config file (:class:`~tailhound.errors.ConfigFileError` when the file
    is not valid: ``tailhound notifier check`` says why)."""
    from .config import load_config

    config = load_config(path)
    node, _ = compose_strict(read_yaml_text(path), str(path))  # load_config read it: within the limits
    return route_tree(config, node)


def trace(tree: RouteNode, labels: dict[str, str]) -> list[RoutePath]:
    """Every route that delivers `labels`, with its path (in delivery order)."""
    return _walk(tree, labels, None, (tree,))


def receivers(paths: list[RoutePath]) -> list[str]:
    """The receivers of `paths`, each once, in order (what the route stage hands to delivery)."""
    return list(dict.fromkeys(p.receiver for p in paths))


def render_tree(tree: RouteNode, inherited: str | None = None, depth: int = 0) -> list[str]:
    """The routing tree, one route a line, indented by depth, with the receiver each delivers to."""
    own = tree.route.receiver or inherited
    suffix = f" -> {own}" + ("" if tree.route.receiver or own is None else " (inherited)") if own else ""
    lines = ["  " * depth + tree.describe() + suffix]
    for child in tree.children:
        lines += render_tree(child, own, depth + 1)
    return lines


def read_incidents(path: Path) -> list[IncidentEvent]:
    """The incident events of a JSON file (one event or a list) or a JSON-lines file (what ``tailhound
    replay --out`` writes); ValueError naming the line of a bad one."""
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if whole is not None:
        items = whole if isinstance(whole, list) else [whole]
        return [_event(item, f"{path}: event {i + 1}") for i, item in enumerate(items)]
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{no}: not JSON: {exc.msg}") from None
        out.append(_event(item, f"{path}:{no}"))
    return out


def _event(item: object, where: str) -> IncidentEvent:
    try:
        return IncidentEvent.model_validate(item)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{where}: not an incident event: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _walk(
    node: RouteNode, labels: dict[str, str], inherited: str | None, steps: tuple[RouteNode, ...]
) -> list[RoutePath]:
    own = node.route.receiver or inherited
    found: list[RoutePath] = []
    matched = False
    for child in node.children:
        if not matches_all(child.route.matchers, labels):
            continue
        matched = True
        found.extend(_walk(child, labels, own, (*steps, child)))
        if not child.route.continue_:
            break
    if not matched and own:
        found.append(RoutePath(steps, own, inherited=node.route.receiver is None))
    return found


def _build(route: Route, node: yaml.Node | None, path: str, line_node: yaml.Node | None) -> RouteNode:
    items = _value(node, "routes")
    children = []
    for i, child in enumerate(route.routes):
        child_node = items.value[i] if isinstance(items, yaml.SequenceNode) and i < len(items.value) else None
        children.append(_build(child, child_node, f"{path}.routes[{i}]", child_node))
    line = line_node.start_mark.line + 1 if line_node is not None else None
    return RouteNode(route, path, line, tuple(children))
