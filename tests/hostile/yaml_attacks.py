"""Hostile YAML documents from issue 28's attacks, built small: a few hundred bytes that expand to half a
million nodes, nesting past Python's recursion limit, a file far over the size limit."""

from __future__ import annotations

from pathlib import Path


def laughs(item: str, nest: str, levels: int = 5, width: int = 9) -> str:
    """A list of ``width ** (levels + 1)`` `item` s once its aliases are expanded (531,441 by default), written
    as nested `nest` mappings (``{all: LIST}``, ``{receiver: ops, routes: LIST}``): each level anchors its
    first list and repeats it by alias, so every level is valid where it stands."""
    text = f"&l0 [&i {item}{', *i' * (width - 1)}]"
    for k in range(1, levels + 1):
        again = ", ".join([nest.format(f"*l{k - 1}")] * (width - 1))
        text = f"&l{k} [{nest.format(text)}, {again}]"
    return text


def alias_rule_file(levels: int = 5) -> str:
    """A rule file whose one rule has 531,441 conditions (under 1 KB)."""
    conditions = laughs("{signal: gpu.temperature, above: 85}", "{{all: {}}}", levels)
    return (
        "groups:\n  - name: t\n    rules:\n      - name: hot\n        scope: gpu\n"
        "        severity: critical\n        root_cause: gpu-thermal-throttle\n"
        f"        when: {{all: {conditions}}}\n"
    )


def alias_notifier_file(levels: int = 5) -> str:
    """A notifier.yaml with 531,441 routes (under 1 KB)."""
    routes = laughs("{receiver: console}", "{{receiver: console, routes: {}}}", levels)
    return f"route:\n  receiver: console\n  routes: {routes}\nreceivers:\n  - type: console\n    name: console\n"


def nested_flow(depth: int, leaf: str = "1") -> str:
    """A value nested `depth` levels deep in flow style: ``[[[...1...]]]``."""
    return "[" * depth + leaf + "]" * depth


def nested_block(key: str, depth: int) -> str:
    """``key:`` holding mappings nested `depth` levels deep, in block style."""
    return f"{key}:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(depth)) + "  " * (depth + 1) + "v: 1\n"


def huge(path: Path, megabytes: int = 30) -> Path:
    """A valid YAML file of `megabytes`: one key and long comment lines."""
    path.write_text("a: 1\n" + ("# " + "x" * 1021 + "\n") * (megabytes * 1024))
    return path
