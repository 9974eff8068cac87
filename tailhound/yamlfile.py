"""Strict YAML files -> pydantic models, with errors that name the file and line.

Every YAML file an operator writes goes through here (settings, rules, agent.yaml, notifier.yaml, ingest.yaml,
the capacity file), so limits on what is read belong in this one place. ``${VAR}`` and ``${VAR:-default}``
are expanded from the environment when asked (agent configs use the pod's NODE_NAME / NODE_IP);
an unset variable without a default is an error, never an empty string; ``$${VAR}`` is a literal and
comment lines are not expanded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.constructor import SafeConstructor

from tailhound.config_errors import Problem, validation_problems
from tailhound.errors import ConfigFileError

M = TypeVar("M", bound=BaseModel)
_VAR = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def line_of(node: yaml.Node | None, loc: list[Any]) -> int | None:
    """1-based line of the deepest YAML node that `loc` (a pydantic error location) reaches."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
            if match is None:
                continue  # a union tag or a missing key: stay on the parent
            node = match[1]
            line = match[0].start_mark.line + 1  # the key's line (a block value starts on the next one)
            continue
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            continue
        line = node.start_mark.line + 1
    return line


class StrictLoader(yaml.SafeLoader):
    """A safe loader that records duplicate mapping keys (plain YAML keeps the last one silently:
    ``for: 1m`` then ``for: 30m`` means 30m)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[yaml.Node, yaml.Node]] = []  # (the duplicate key, the first one)

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, yaml.Node] = {}
            for key_node, _ in node.value:
                key = getattr(key_node, "value", None)
                if isinstance(key, str) and key in seen:
                    self.duplicates.append((key_node, seen[key]))
                elif isinstance(key, str):
                    seen[key] = key_node
        return SafeConstructor.construct_mapping(self, node, deep)


def compose_with_duplicates(text: str) -> tuple[yaml.Node | None, Any, list[tuple[yaml.Node, yaml.Node]]]:
    """(the YAML node tree, the data, the duplicate keys as (duplicate, first) key nodes); raises
    ``yaml.YAMLError`` for invalid YAML. The checkers report duplicates as problems, loaders refuse them."""
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data, loader.duplicates


def mapping_pair(node: yaml.Node | None, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The (key, value) nodes of `key` in a mapping node; the last one when the key is there twice (as YAML
    keeps); None when `node` is not a mapping or lacks the key."""
    if isinstance(node, yaml.MappingNode):
        return next(((k, v) for k, v in reversed(node.value) if getattr(k, "value", None) == key), None)
    return None


def mapping_value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    pair = mapping_pair(node, key)
    return pair[1] if pair else None


def mapping_key(node: yaml.Node | None, key: str) -> yaml.Node | None:
    pair = mapping_pair(node, key)
    return pair[0] if pair else None


def compose_strict(text: str, origin: str) -> tuple[yaml.Node | None, Any]:
    """(the YAML node tree, the data) of `text`; invalid YAML or a duplicate key is a
    :class:`ConfigFileError` naming the line (the file's type decides the exact error class upstream)."""
    try:
        node, data, duplicates = compose_with_duplicates(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigFileError(origin, mark.line + 1 if mark else None,
                              f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from exc
    if duplicates:
        key, first = duplicates[0]
        raise ConfigFileError(origin, key.start_mark.line + 1,
                              f"duplicate key {key.value!r} (first at line {first.start_mark.line + 1})")
    return node, data


def expand_env(text: str, origin: str, env: dict[str, str] | None = None) -> str:
    """Expand ``${VAR}`` / ``${VAR:-default}``; ``$${VAR}`` stays a literal ``${VAR}``. Lines that are
    only a comment are left alone, so documentation in the file never needs the variables it mentions."""
    env = os.environ if env is None else env
    out = []
    for line_no, line in enumerate(text.splitlines(keepends=True), 1):
        if line.lstrip().startswith("#"):
            out.append(line)
            continue

        def sub(m: re.Match[str], line_no: int = line_no) -> str:
            escaped, name, default = m.group(1), m.group(2), m.group(3)
            if escaped:
                return m.group(0)[1:]
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigFileError(origin, line_no,
                                  f"environment variable {name} is not set (write ${{{name}:-default}})")

        out.append(_VAR.sub(sub, line))
    return "".join(out)


def parse_yaml_model(text: str, model: type[M], origin: str, *, env: bool = False) -> M:
    """`text` validated as `model`; a :class:`ConfigFileError` with every problem at its line and column."""
    if env:
        text = expand_env(text, origin)
    node, data = compose_strict(text, origin)
    return validate_node(model, data, node, origin)


def validate_node(model: type[M], data: Any, node: yaml.Node | None, origin: str) -> M:
    """`data` (composed from `node`) validated as `model`; errors through the one config error formatter."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise file_error(origin, validation_problems(exc, node, origin, model)) from exc


def file_error(origin: str, problems: list[Problem]) -> ConfigFileError:
    """The error for `problems` (at least one) of the file `origin`: the first in its text, all attached."""
    problems = sorted(problems, key=lambda p: (p.line or 0, p.column or 0))
    first = problems[0]
    return ConfigFileError(first.path or origin, first.line, first.message, column=first.column, hint=first.hint,
                           problems=tuple(problems))


def load_yaml_model(path: str | Path, model: type[M], *, env: bool = False) -> M:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(str(p), None, f"cannot read: {exc.strerror}") from exc
    return parse_yaml_model(text, model, str(p), env=env)
