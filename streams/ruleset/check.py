"""``tailhound rules check``: every problem of every rule file at once, each at its line and column, with a hint
(pure; no broker).

What :func:`tailhound.streams.ruleset.rulefile.load_rules` refuses at the first error this reports in full, one
rule at a time so a broken rule hides nothing about the others: YAML syntax and duplicate keys, each rule's
structure (nearest valid key or value), unknown signals (nearest known one) and per-entity signals without
``reduce``, declared engines, action placeholders (a ``{gpuz}`` would reach the on-call as text), and rule names
defined twice.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tailhound.catalog import Catalog, default_catalog
from tailhound.errors import RuleFileError
from tailhound.problems import Problem, compose_for_check
from tailhound.vocabulary import RootCause, Severity
from tailhound.yamlfile import mapping_key as _key
from tailhound.yamlfile import mapping_value as _value
from tailhound.yamlfile import read_text as read_yaml_text
from tailhound.yamlfile import yaml_error_text

from ..extract import signal_per
from ..known_signals import known_signals
from .conditions import Absent, AllOf, AnyOf, NotOf, Reduce, Ref, SignalCondition
from .rulefile import Engine, Rule, RuleGroup, Scope, _check_engines

#: what an action may name besides the signals its rule reports (streams/evidence.py render_action)
SCOPE_PLACEHOLDERS = ("node", "gpus", "model", "engine")
_PLACEHOLDER = re.compile(r"\{([^{}\s]*)\}")
_ENUMS: dict[str, type[StrEnum]] = {
    "severity": Severity,
    "root_cause": RootCause,
    "fallback_root_cause": RootCause,
    "scope": Scope,
    "reduce": Reduce,
    "engines": Engine,
}
_RULE_KEYS = sorted({f.alias or n for n, f in Rule.model_fields.items()})
_CONDITION_KEYS = sorted(
    {f.alias or n for m in (SignalCondition, Absent, AllOf, AnyOf, NotOf, Ref) for n, f in m.model_fields.items()}
)
_CONDITION_TAGS = frozenset({"signal", "all", "any", "not", "absent"})
_LEVEL_KEYS = {"file": ["groups"], "group": sorted(RuleGroup.model_fields)}


def rule_files(paths: list[Path]) -> tuple[list[Path], list[Problem]]:
    """The rule files `paths` name (files, or the ``*.yaml``/``*.yml`` files of directories)."""
    files: list[Path] = []
    problems: list[Problem] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
            if not found:
                problems.append(Problem(str(p), None, None, "no *.yaml rule files in this directory"))
            files += found
        elif p.is_file():
            files.append(p)
        else:
            problems.append(Problem(str(p), None, None, "no such file or directory"))
    return files, problems


def check_paths(paths: list[Path], catalog: Catalog | None = None) -> tuple[list[Problem], int]:
    """(every problem of every rule file under `paths`, how many rules were read)."""
    catalog = catalog or default_catalog()
    files, problems = rule_files(paths)
    names: dict[str, tuple[str, int | None]] = {}
    count = 0
    for path in files:
        try:
            text = read_yaml_text(path)
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(str(path), None, None, f"cannot read: {exc}"))
            continue
        except yaml.YAMLError as exc:  # over the size limit: refused before it is read whole
            problems.append(Problem(str(path), None, None, yaml_error_text(exc)))
            continue
        found, rules = check_text(text, str(path), catalog)
        problems += found
        for name, line, _ in rules:
            count += 1
            if name in names:
                other = names[name]
                problems.append(
                    Problem(str(path), line, None, f"rule {name!r} is defined twice", f"also at {other[0]}:{other[1]}")
                )
            elif name:
                names[name] = (str(path), line)
    problems.sort(key=lambda p: (p.path, p.line or 0, p.column or 0))
    return problems, count


def check_text(
    text: str, origin: str, catalog: Catalog | None = None
) -> tuple[list[Problem], list[tuple[str | None, int, Rule | None]]]:
    """(the problems of one rule file, its rules: (name, line, the rule when it is valid))."""
    catalog = catalog or default_catalog()
    node, data, problems, parsed = compose_for_check(text, origin)
    if not parsed:
        return problems, []
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        return [*problems, Problem(origin, 1, 1, "a rule file is a mapping with `groups:`")], []
    problems += _unknown_keys(node, "file", origin)
    groups = _value(node, "groups")
    if not isinstance(groups, yaml.SequenceNode) or not groups.value:
        return [*problems, _at(origin, _key(node, "groups") or node, "`groups:` must list at least one group")], []
    rules: list[tuple[str | None, int, Rule | None]] = []
    for gi, group_node in enumerate(groups.value):
        group = data["groups"][gi]
        if not isinstance(group, dict) or not isinstance(group_node, yaml.MappingNode):
            problems.append(_at(origin, group_node, "a group is a mapping with `name:` and `rules:`"))
            continue
        problems += _unknown_keys(group_node, "group", origin)
        if not isinstance(group.get("name"), str):
            problems.append(_at(origin, _key(group_node, "name") or group_node, "a group needs `name: <text>`"))
        rule_nodes = _value(group_node, "rules")
        if not isinstance(rule_nodes, yaml.SequenceNode) or not rule_nodes.value:
            problems.append(
                _at(origin, _key(group_node, "rules") or group_node, "`rules:` must list at least one rule")
            )
            continue
        for ri, rule_node in enumerate(rule_nodes.value):
            raw = group["rules"][ri]
            rule, found = check_rule(raw, rule_node, origin, catalog)
            problems += found
            name = raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None
            rules.append((name, rule_node.start_mark.line + 1, rule))
    return problems, rules


def check_rule(data: Any, node: yaml.Node, origin: str, catalog: Catalog) -> tuple[Rule | None, list[Problem]]:
    """One rule's problems (structure first; signals, engines and placeholders once it is valid)."""
    name = data.get("name") if isinstance(data, dict) else None
    prefix = f"rule {name}: " if isinstance(name, str) else "rule: "
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        return None, [_at(origin, node, "a rule is a mapping (name, scope, when, ...)")]
    scope = data.get("scope")
    problems = list(_signal_problems(scope if scope in set(Scope) else None, node, origin, catalog, prefix))
    problems += _placeholder_problems(node, origin, prefix)
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        return None, [_validation_problem(err, node, origin, prefix) for err in exc.errors()] + problems
    if rule.engines is not None and not problems:
        engines = _key(node, "engines") or node
        try:
            _check_engines(rule, catalog, origin, engines.start_mark.line + 1)
        except RuleFileError as exc:
            problems.append(_at(origin, engines, exc.detail))
    return rule, problems


def _validation_problem(err: dict, node: yaml.Node, origin: str, prefix: str) -> Problem:
    target, key_node, where = _locate(node, list(err["loc"]))
    msg = err["msg"].removeprefix("Value error, ")
    hint = ""
    last = where.rsplit(".", 1)[-1].split("[")[0] if where else ""
    if err["type"] == "extra_forbidden":
        allowed = _RULE_KEYS if "." not in where else _CONDITION_KEYS
        hint = _nearest(last, allowed, "valid keys here")
        msg, where = f"unknown key {last!r}", where.rpartition(".")[0]
    elif err["type"] == "missing":
        msg, where = f"missing key {last!r}", where.rpartition(".")[0]
    elif err["type"] == "enum" and last in _ENUMS:
        hint = _nearest(str(err.get("input")), [e.value for e in _ENUMS[last]], "valid values")
    at = key_node if err["type"] in ("extra_forbidden", "missing") and key_node is not None else target
    return _at(origin, at, f"{prefix}{where + ': ' if where else ''}{msg}", hint)


def _signal_problems(
    scope: str | None, node: yaml.Node, origin: str, catalog: Catalog, prefix: str
) -> Iterator[Problem]:
    """Unknown signals, and per-entity signals without ``reduce`` (when the scope is known), from the YAML."""
    names = known_signals(catalog)
    when = _value(node, "when")
    for key, value, mapping in _walk_signals(when):
        signal = str(value.value)
        per = signal_per(signal, catalog)
        if per is None:
            yield _at(
                origin, value, f"{prefix}unknown signal {signal!r}", _nearest(signal, names, "see docs/signals.md")
            )
            continue
        reduce = _value(mapping, "reduce") if key == "signal" else None
        if scope is not None and reduce is None and per and per != (scope,):
            yield _at(
                origin,
                value,
                f"{prefix}signal {signal} is per {'/'.join(per)}, the rule's scope is {scope}",
                "add `reduce: max|min|mean|sum|count` to fold it onto the rule's scope",
            )
    context = _value(node, "context")
    for item in context.value if isinstance(context, yaml.SequenceNode) else ():
        signal = str(getattr(item, "value", ""))
        if signal_per(signal, catalog) is None:
            yield _at(
                origin,
                item,
                f"{prefix}unknown signal {signal!r} (context)",
                _nearest(signal, names, "see docs/signals.md"),
            )


def reported_names(node: yaml.Node) -> set[str]:
    """The evidence names a rule's incidents carry, from its YAML (what ``{<signal>}`` placeholders can
    show): each condition's signal (``sum(x)`` when reduced) and the context signals."""
    out: set[str] = set()
    for key, value, mapping in _walk_signals(_value(node, "when")):
        reduce = _value(mapping, "reduce") if key == "signal" else None
        out.add(f"{reduce.value}({value.value})" if isinstance(reduce, yaml.ScalarNode) else str(value.value))
    context = _value(node, "context")
    out.update(str(getattr(i, "value", "")) for i in (context.value if isinstance(context, yaml.SequenceNode) else ()))
    return out


def _placeholder_problems(node: yaml.Node, origin: str, prefix: str) -> Iterator[Problem]:
    actions = _value(node, "actions")
    if not isinstance(actions, yaml.SequenceNode):
        return
    valid = sorted(set(SCOPE_PLACEHOLDERS) | reported_names(node))
    for item in actions.value:
        text = str(getattr(item, "value", ""))
        for m in _PLACEHOLDER.finditer(text):
            if m.group(1) in valid:
                continue
            quote = 1 if getattr(item, "style", None) in ("'", '"') else 0
            line = item.start_mark.line + 1
            col = item.start_mark.column + 1 + quote + m.start() if "\n" not in text[: m.start()] else None
            yield Problem(
                origin,
                line,
                col,
                f"{prefix}action placeholder {m.group(0)} names nothing this rule reports (people would read n/a)",
                _nearest(
                    m.group(1),
                    valid,
                    "placeholders: node, gpus, model, engine, and the signals of the rule's conditions and context",
                ),
            )


def _walk_signals(node: yaml.Node | None) -> Iterator[tuple[str, yaml.ScalarNode, yaml.MappingNode]]:
    """(key, value, its mapping) for every ``signal:`` / ``absent:`` scalar under `node`."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) in ("signal", "absent") and isinstance(v, yaml.ScalarNode):
                yield k.value, v, node
            else:
                yield from _walk_signals(v)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _walk_signals(item)


def _locate(node: yaml.Node, loc: list[Any]) -> tuple[yaml.Node, yaml.Node | None, str]:
    """The deepest node a pydantic error location reaches, its key node, and the location as people write it
    (``when.all[1].signal``; pydantic's union tags and validator names dropped)."""
    where = ""
    key_node = None
    tag_next = False  # a condition's place: pydantic's location names its union tag next (signal, all, ...)
    for part in loc:
        if tag_next and part in _CONDITION_TAGS:
            tag_next = False
            continue
        tag_next = False
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if match is None:
                if part in _RULE_KEYS or part in _CONDITION_KEYS:  # a missing or an unknown key
                    where = f"{where}.{part}" if where else part
                continue
            key_node, node = match
            where = f"{where}.{part}" if where else part
            tag_next = part in ("when", "not")
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            tag_next = where.rsplit(".", 1)[-1] in ("all", "any")
            node, key_node = node.value[part], None
            where = f"{where}[{part}]"
    return node, key_node, where


def _unknown_keys(node: yaml.MappingNode, level: str, origin: str) -> list[Problem]:
    allowed = _LEVEL_KEYS[level]
    return [
        _at(
            origin,
            k,
            f"unknown key {k.value!r} in a {'rule file' if level == 'file' else 'group'}",
            _nearest(str(k.value), allowed, "valid keys here"),
        )
        for k, _ in node.value
        if getattr(k, "value", None) not in allowed
    ]


def _at(origin: str, node: yaml.Node, message: str, hint: str = "") -> Problem:
    return Problem(origin, node.start_mark.line + 1, node.start_mark.column + 1, message, hint)


def _nearest(word: str, choices: list[str] | set[str], what: str) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7)
    if close:
        return f"did you mean {close[0]!r}?"
    listed = sorted(choices)
    return f"{what}: {', '.join(listed)}" if len(listed) <= 12 else what
