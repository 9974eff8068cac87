"""Strict YAML files -> pydantic models, with errors that name the file and line.

Used by every YAML file an operator writes (rules, agent config). ``${VAR}`` and ``${VAR:-default}``
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
    if env:
        text = expand_env(text, origin)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigFileError(origin, mark.line + 1 if mark else None,
                            f"invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        msg = f"{where}: {err['msg']}" if where else err["msg"].removeprefix("Value error, ")
        raise ConfigFileError(origin, line_of(node, list(err["loc"])), f"{msg}{more}") from exc


def load_yaml_model(path: str | Path, model: type[M], *, env: bool = False) -> M:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(str(p), None, f"cannot read: {exc.strerror}") from exc
    return parse_yaml_model(text, model, str(p), env=env)
