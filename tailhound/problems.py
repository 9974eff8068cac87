"""Problems found in a file people write (rules, notifier config, tests), at their line and column, with a
hint (:class:`~tailhound.config_errors.Problem`, re-exported here); printed as ``path:line:col: message (hint)``
or as a GitHub Actions annotation. The checkers report every problem they find at once."""

from __future__ import annotations

from typing import Any

import yaml

from tailhound.config_errors import Problem
from tailhound.yamlfile import compose_with_duplicates, yaml_error_text

__all__ = ["Problem", "at", "compose_for_check"]


def at(origin: str, node: yaml.Node, message: str, hint: str = "") -> Problem:
    """A problem at `node`'s first character."""
    return Problem(origin, node.start_mark.line + 1, node.start_mark.column + 1, message, hint)


def compose_for_check(text: str, origin: str) -> tuple[yaml.Node | None, Any, list[Problem], bool]:
    """(node tree, data, problems, parsed) of a YAML file a checker reads: invalid YAML is one problem at its
    mark (parsed False); each duplicate key is a problem at the duplicate (YAML keeps only the last one)."""
    try:
        node, data, duplicates = compose_with_duplicates(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return (
            None,
            None,
            [Problem(origin, mark.line + 1 if mark else None, mark.column + 1 if mark else None, yaml_error_text(exc))],
            False,
        )
    problems = [
        Problem(
            origin,
            k.start_mark.line + 1,
            k.start_mark.column + 1,
            f"duplicate key {k.value!r}",
            f"first at line {first.start_mark.line + 1}; YAML keeps only the last one",
        )
        for k, first in duplicates
    ]
    return node, data, problems, True
