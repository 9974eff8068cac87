"""A problem found in a file people write (rules, notifier config, tests), at its line and column, with a
hint; printed as ``path:line:col: message (hint)`` or as a GitHub Actions annotation. The checkers
(``tailhound rules check``, ``tailhound notifier check``) report every problem they find at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from tailhound.yamlfile import compose_with_duplicates


@dataclass(frozen=True)
class Problem:
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
        props = ",".join(f"{k}={_gh(str(v), prop=True)}" for k, v in
                         (("file", self.path), ("line", self.line), ("col", self.column)) if v is not None)
        msg = self.message + (f" ({self.hint})" if self.hint else "")
        return f"::error {props},title={_gh(title, prop=True)}::{_gh(msg)}"


def _gh(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


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
        return None, None, [Problem(origin, mark.line + 1 if mark else None, mark.column + 1 if mark else None,
                                    f"invalid YAML: {getattr(exc, 'problem', None) or exc}")], False
    problems = [Problem(origin, k.start_mark.line + 1, k.start_mark.column + 1, f"duplicate key {k.value!r}",
                        f"first at line {first.start_mark.line + 1}; YAML keeps only the last one")
                for k, first in duplicates]
    return node, data, problems, True
