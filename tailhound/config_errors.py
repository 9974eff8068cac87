"""One error formatter for every config file kind: a pydantic validation error becomes
``FILE:LINE:COL: path.to.key: message (did you mean 'app_id'?)``, found in the YAML node tree, with no pydantic
internals (no ``input_type=``, no ``errors.pydantic.dev`` link, no ``Value error,`` prefix).

Settings, agent.yaml, notifier.yaml, ingest.yaml and the capacity file are loaded through
:mod:`tailhound.yamlfile`, which raises :class:`~tailhound.errors.ConfigFileError` with these problems; the
checkers (``tailhound check``, ``notifier check``, ``rules check``) print them all."""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


@dataclass(frozen=True)
class Problem:
    """A problem found in a file people write, at its line and column, with a hint."""

    path: str
    line: int | None
    column: int | None
    message: str
    hint: str = ""

    def text(self) -> str:
        where = ":".join(str(x) for x in (self.path, self.line, self.column) if x is not None)
        return f"{where}: {self.message}" + (f" ({self.hint})" if self.hint else "")

    def github(self, title: str = "tailhound") -> str:
        """A GitHub Actions workflow command: an annotation on the file and line (`title`: the checker)."""
        props = ",".join(
            f"{k}={_gh(str(v), prop=True)}"
            for k, v in (("file", self.path), ("line", self.line), ("col", self.column))
            if v is not None
        )
        msg = self.message + (f" ({self.hint})" if self.hint else "")
        return f"::error {props},title={_gh(title, prop=True)}::{_gh(msg)}"


def _gh(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def nearest(word: str, choices: typing.Iterable[str], what: str, limit: int = 16) -> str:
    """``did you mean 'x'?`` for the closest of `choices`, else the choices listed (when few), else `what`."""
    listed = sorted(set(choices))
    close = difflib.get_close_matches(word, listed, n=1, cutoff=0.7) if word else []
    if close:
        return f"did you mean {close[0]!r}?"
    return f"{what}: {', '.join(listed)}" if listed and len(listed) <= limit else what


def validation_problems(
    exc: ValidationError, node: yaml.Node | None, origin: str, model: type[BaseModel]
) -> list[Problem]:
    """Every error of `exc` (validating `model` from the YAML under `node`) at its node, in people's terms."""
    problems = [validation_problem(err, node, origin, model) for err in exc.errors()]
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


def validation_problem(
    err: Any, node: yaml.Node | None, origin: str, model: type[BaseModel], *, env_prefix: str | None = None
) -> Problem:
    """One pydantic error as a problem; with `env_prefix` (``TAILHOUND_``) it came from the environment and
    names the variable (``TAILHOUND_STREAMS__APP_IDD``) instead of a line."""
    loc = list(err["loc"])
    target, key_node, where = locate(node, loc)
    kind, last = err["type"], str(loc[-1]) if loc else ""
    msg, hint, at = clean_message(err), "", target
    if kind == "extra_forbidden":
        where, at = parent(where), key_node or target
        keys = keys_at(model, loc[:-1])
        if env_prefix is not None:
            keys = [env_var(env_prefix, [*loc[:-1], k]) for k in keys]
            last = env_var(env_prefix, loc)
        msg = f"unknown variable {last}" if env_prefix is not None else f"unknown key {last!r}"
        hint = nearest(last, keys, "valid keys here")
    elif kind == "missing":
        msg, where = f"missing key {last!r}", parent(where)
    elif kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        discriminator = str(ctx.get("discriminator", "type")).strip("'")
        tag_node = mapping_value(target, discriminator)
        at = tag_node if tag_node is not None else target
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        msg, hint = f"unknown {discriminator} {ctx.get('tag')!r}", nearest(str(ctx.get("tag")), expected, "types")
    elif kind == "union_tag_not_found":
        msg = f"missing key {str(err.get('ctx', {}).get('discriminator', 'type')).strip(chr(39))!r}"
    elif kind in ("literal_error", "enum") and isinstance(err.get("input"), str):
        hint = nearest(
            err["input"], re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", ""))), "valid values", limit=0
        )
        hint = hint if hint.startswith("did you mean") else ""
    if env_prefix is not None:  # from the environment: name the variable, there is no line
        return Problem(
            origin, None, None, msg if kind == "extra_forbidden" else f"{env_var(env_prefix, loc)}: {msg}", hint
        )
    text = f"{where}: {msg}" if where else msg
    if isinstance(at, yaml.MappingNode | yaml.SequenceNode) and key_node is not None and at is target:
        at = key_node  # a whole block is wrong: point at its key, not the next line where its content starts
    if at is None:
        return Problem(origin, 1 if node is not None else None, 1 if node is not None else None, text, hint)
    return Problem(origin, at.start_mark.line + 1, at.start_mark.column + 1, text, hint)


def env_var(prefix: str, loc: list[Any]) -> str:
    """The environment variable of a settings location: ``TAILHOUND_`` + ``STREAMS__APP_ID``."""
    return (prefix + "__".join(str(x) for x in loc)).upper()


def clean_message(err: Any) -> str:
    """pydantic's message without its prefixes (``Value error, ``) and in this project's words."""
    msg = str(err.get("msg", ""))
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if err.get("type") in ("float_parsing", "float_type", "int_parsing", "int_type", "bool_parsing") and isinstance(
        err.get("input"), str
    ):
        msg = f"{msg} (got {err['input'][:40]!r})"
    return msg


def parent(where: str) -> str:
    return re.sub(r"(\.[^.\[\]]+|\[\d+\])$", "", where) if where else where


def mapping_value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    """The value node of `key` in a mapping node (the last one, as YAML keeps), None when absent."""
    if isinstance(node, yaml.MappingNode):
        return next((v for k, v in reversed(node.value) if getattr(k, "value", None) == key), None)
    return None


def locate(node: yaml.Node | None, loc: list[Any]) -> tuple[yaml.Node | None, yaml.Node | None, str]:
    """The deepest node a pydantic error location reaches, its key node, and the location as people write
    it (``route.routes[0].matchers[1]``; union tags such as a receiver's type dropped)."""
    where, key_node = "", None
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(((k, v) for k, v in reversed(node.value) if getattr(k, "value", None) == part), None)
            if match is None:
                tag = mapping_value(node, "type")
                if not (isinstance(tag, yaml.ScalarNode) and tag.value == part):  # a missing key, not a union tag
                    where = f"{where}.{part}" if where else part
                continue
            key_node, node = match
            where = f"{where}.{part}" if where else part
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node, key_node = node.value[part], None
            where = f"{where}[{part}]"
        elif isinstance(part, int):
            where = f"{where}[{part}]"
    return node, key_node, where


def keys_at(model: type[BaseModel], loc: list[Any]) -> list[str]:
    """The keys `model` allows at `loc` (a pydantic location; union tags pick the member)."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(part, int) and origin in (list, tuple):
            tp = typing.get_args(tp)[0]
        elif isinstance(part, str) and _is_model(tp):
            fld = next((f for n, f in tp.model_fields.items() if (f.alias or n) == part), None)
            if fld is None:
                return []
            tp = fld.annotation
        elif isinstance(part, str) and origin in (typing.Union, types.UnionType):
            tp = next((m for m in typing.get_args(tp) if _is_model(m) and part in _literals(m, "type")), None)
            if tp is None:
                return []
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if not _is_model(tp):
        return []
    # a model may accept keys that are not its fields (Alertmanager's names for ours): KEY_ALIASES
    return sorted({f.alias or n for n, f in tp.model_fields.items()} | set(getattr(tp, "KEY_ALIASES", ())))


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            tp = args[0]
        elif origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
            tp = next(a for a in args if a is not type(None))
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _literals(model: type[BaseModel], name: str) -> tuple[Any, ...]:
    fld = model.model_fields.get(name)
    return typing.get_args(fld.annotation) if fld is not None else ()
