"""``tailhound notifier check`` and ``tailhound check``: every problem of notifier config files at once, each
at its line and column with a hint, as amtool checks with Alertmanager's own loader.

The problems are those of the one validator the notifier loads its config with
(:func:`tailhound.notifier.config.check_text`), plus the labels incidents carry
(:mod:`tailhound.notifier.label_space`, read from the rule pack) and, with ``--secrets``, what the worker
resolves at start.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tailhound.errors import ConfigError
from tailhound.problems import Problem, at
from tailhound.yamlfile import mapping_value as _value
from tailhound.yamlfile import read_text as read_yaml_text
from tailhound.yamlfile import yaml_error_text

from .config import CheckedFile, check_text
from .config_lint import WarningProblem, is_error
from .label_space import (
    STREAMS_LABELS,
    LabelSpace,
    MatcherIssue,
    fixed_labels,
    label_issues,
    label_space,
    matcher_issues,
)
from .receivers.registry import build_receiver

__all__ = [
    "STREAMS_LABELS",
    "CheckedFile",
    "LabelSpace",
    "MatcherIssue",
    "WarningProblem",
    "check_file",
    "check_secrets",
    "check_text",
    "fixed_labels",
    "is_error",
    "label_issues",
    "label_space",
    "matcher_issues",
]


def check_file(path: Path, space: LabelSpace | None) -> CheckedFile:
    if not path.exists():
        return CheckedFile(str(path), [Problem(str(path), None, None, "no such file")], missing=True)
    if path.is_dir():
        return CheckedFile(str(path), [Problem(str(path), None, None, "a directory, not a notifier config file")])
    try:
        text = read_yaml_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        return CheckedFile(str(path), [Problem(str(path), None, None, f"cannot read: {exc}")])
    except yaml.YAMLError as exc:  # over the size limit
        return CheckedFile(str(path), [Problem(str(path), None, None, yaml_error_text(exc))])
    return check_text(text, str(path), space)


def check_secrets(
    checked: CheckedFile, allowed_hosts: list[str], environ: dict[str, str] | None = None
) -> list[Problem]:
    """What the worker does at start: resolve every receiver's secrets and check its URLs against the
    allow-list; each failure at its receiver's line."""
    if checked.config is None:
        return []
    items = _value(checked.node, "receivers")
    out: list[Problem] = []
    for i, rc in enumerate(checked.config.receivers):
        try:
            build_receiver(rc, allowed_hosts=allowed_hosts, environ=environ)
        except ConfigError as exc:
            item = items.value[i] if isinstance(items, yaml.SequenceNode) and i < len(items.value) else None
            out.append(
                at(checked.path, item, str(exc)) if item is not None else Problem(checked.path, None, None, str(exc))
            )
    return out
