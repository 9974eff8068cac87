"""Strict YAML files -> pydantic models, with errors that name the file and line.

Every YAML file the project reads goes through here (settings, rules, rule tests, agent.yaml, notifier.yaml,
ingest.yaml, the capacity file, the bundled catalog), so limits on what is read belong in this one place
(:data:`LIMITS`): a file over ``max_bytes``, nested deeper than ``max_depth``, with more than ``max_aliases``
aliases or more than ``max_nodes`` nodes once every alias is expanded (a few aliases of aliases make millions)
is refused with a :class:`YamlLimitError` at its line, before anything is built from it.

``${VAR}`` and ``${VAR:-default}`` are expanded from the environment when asked (agent configs use the pod's
NODE_NAME / NODE_IP);
an unset variable without a default is an error, never an empty string; ``$${VAR}`` is a literal and
comment lines are not expanded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.constructor import SafeConstructor
from yaml.error import MarkedYAMLError

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


@dataclass(frozen=True)
class YamlLimits:
    """What one YAML file may hold. The largest bundled file (the signal catalog) is 35 KB, 1,716 nodes and
    14 levels deep, so these leave room for big real files (30x, 60x, 4x) and refuse what only an attack
    writes. PyYAML's pure-Python composer (the one that can count depth and aliases) reads about 0.1-1 MB/s,
    so the byte limit also bounds the time a file takes: seconds, on a thread for reloads."""

    max_bytes: int = 1024 * 1024
    max_depth: int = 64
    max_aliases: int = 512
    max_nodes: int = 100_000  # counted with every alias expanded, as the data will be


LIMITS = YamlLimits()


class YamlLimitError(MarkedYAMLError):
    """A YAML file over one of :class:`YamlLimits`; a ``yaml.YAMLError``, so every caller reports it as such."""

    def __init__(self, problem: str, mark: yaml.Mark | None = None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class StrictLoader(yaml.SafeLoader):
    """A safe loader that records duplicate mapping keys (plain YAML keeps the last one silently:
    ``for: 1m`` then ``for: 30m`` means 30m) and refuses documents over `limits` while it composes them."""

    def __init__(self, stream: str, limits: YamlLimits = LIMITS) -> None:
        if len(stream) > limits.max_bytes:  # characters: never fewer than the bytes a UTF-8 file has
            raise YamlLimitError(f"file too large: {len(stream):,} characters, the limit is {limits.max_bytes:,}")
        super().__init__(stream)
        self.limits = limits
        self.duplicates: list[tuple[yaml.Node, yaml.Node]] = []  # (the duplicate key, the first one)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes under it, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.limits.max_aliases:
                raise YamlLimitError(
                    f"too many aliases: more than {self.limits.max_aliases}", self.peek_event().start_mark
                )
        self._depth += 1
        try:
            if self._depth > self.limits.max_depth:  # the composer recurses: refuse before Python's stack does
                raise YamlLimitError(
                    f"nested too deep: more than {self.limits.max_depth} levels", self.peek_event().start_mark
                )
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(node)
        return node

    def _count(self, node: yaml.Node) -> None:
        """Size `node` (its children are sized already: an alias is its anchor's node, counted again in full)."""
        if id(node) in self._sizes:
            total = self._sizes[id(node)]  # an alias: the anchored node once more
        else:
            kids = (
                node.value
                if isinstance(node, yaml.SequenceNode)
                else [n for pair in node.value for n in pair]
                if isinstance(node, yaml.MappingNode)
                else []
            )
            total = 1 + sum(self._sizes.get(id(k), 1) for k in kids)
            self._sizes[id(node)] = total
        if total > self.limits.max_nodes:
            raise YamlLimitError(
                f"too many nodes: more than {self.limits.max_nodes:,} once its aliases are expanded", node.start_mark
            )

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


def compose_with_duplicates(
    text: str, limits: YamlLimits = LIMITS
) -> tuple[yaml.Node | None, Any, list[tuple[yaml.Node, yaml.Node]]]:
    """(the YAML node tree, the data, the duplicate keys as (duplicate, first) key nodes); raises
    ``yaml.YAMLError`` for invalid YAML or a file over `limits`. The checkers report duplicates as problems,
    loaders refuse them."""
    loader = StrictLoader(text, limits)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data, loader.duplicates


def safe_load(text: str, limits: YamlLimits = LIMITS) -> Any:
    """`text` as data, as ``yaml.safe_load`` but within `limits` (duplicate keys: the last one, as YAML keeps)."""
    return compose_with_duplicates(text, limits)[1]


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """What a YAML error says to people: a refused file says why, anything else is invalid YAML."""
    problem = getattr(exc, "problem", None) or exc
    return f"refused: {problem}" if isinstance(exc, YamlLimitError) else f"invalid YAML: {problem}"


def read_text(path: str | Path, limits: YamlLimits = LIMITS) -> str:
    """The text of the file at `path`, reading no more than ``limits.max_bytes`` (+1, to tell it was more);
    ``OSError`` / ``UnicodeDecodeError`` as ``Path.read_text``, :class:`YamlLimitError` when too large."""
    with open(path, "rb") as f:
        data = f.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise YamlLimitError(f"file too large: over {limits.max_bytes:,} bytes")
    return data.decode("utf-8")


def read_config_text(
    path: str | Path, error: Callable[[str, int | None, str], Exception], cannot_read: str = "cannot read"
) -> str:
    """:func:`read_text`, with what goes wrong (unreadable, too large) raised as ``error(file, None, why)``: the
    caller's own exception (a config, rule or rule-test file error)."""
    try:
        return read_text(path)
    except OSError as exc:
        raise error(str(path), None, f"{cannot_read}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise error(str(path), None, yaml_error_text(exc)) from None


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
        raise ConfigFileError(origin, mark.line + 1 if mark else None, yaml_error_text(exc)) from exc
    if duplicates:
        key, first = duplicates[0]
        raise ConfigFileError(
            origin, key.start_mark.line + 1, f"duplicate key {key.value!r} (first at line {first.start_mark.line + 1})"
        )
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
            raise ConfigFileError(
                origin, line_no, f"environment variable {name} is not set (write ${{{name}:-default}})"
            )

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
    return ConfigFileError(
        first.path or origin, first.line, first.message, column=first.column, hint=first.hint, problems=tuple(problems)
    )


def load_yaml_model(path: str | Path, model: type[M], *, env: bool = False) -> M:
    p = Path(path)
    return parse_yaml_model(read_config_text(p, ConfigFileError), model, str(p), env=env)
