"""``tailhound check FILE...``: validate any config file with the loader its process uses (like ``promtool
check config`` / ``amtool check-config``): agent.yaml, notifier.yaml, ingest.yaml, a settings file, rule files,
the capacity file. The kind is read from the file's top-level keys (or given with ``--kind``); each file
prints ``FILE: OK (kind)`` or its problems as ``FILE:LINE:COL: path.to.key: message (hint)``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from tailhound.agents.config import AgentConfig, load_agent_config
from tailhound.capacity_file import CapacityFile, load_capacity_file
from tailhound.config_errors import Problem
from tailhound.errors import ConfigError, ConfigFileError
from tailhound.ingest.config import IngestServiceConfig, load_ingest_config
from tailhound.notifier.config import ROUTE_GROUPING_KEYS, NotifierConfig
from tailhound.resources import default_rules_dir
from tailhound.settings import Settings, check_settings_file
from tailhound.yamlfile import compose_with_duplicates
from tailhound.yamlfile import read_text as read_yaml_text

KINDS = ("agent", "notifier", "ingest", "settings", "rules", "capacity")
#: the top-level keys of each kind (a file's kind is the one sharing most keys with it)
_MODELS: dict[str, type[BaseModel]] = {
    "agent": AgentConfig,
    "notifier": NotifierConfig,
    "ingest": IngestServiceConfig,
    "settings": Settings,
    "capacity": CapacityFile,
}


@dataclass
class Checked:
    """One file checked: its kind (None: not told), its problems and warnings."""

    path: str
    kind: str | None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


def top_keys(kind: str) -> set[str]:
    if kind == "rules":
        return {"groups"}
    fields = _MODELS[kind].model_fields
    return {f.alias or n for n, f in fields.items()} | (set(ROUTE_GROUPING_KEYS) if kind == "notifier" else set())


def detect_kind(path: Path) -> tuple[str | None, str]:
    """(the kind of the file at `path`, why not when None): the kind sharing most top-level keys with it."""
    try:
        _, data, _ = compose_with_duplicates(read_yaml_text(path))
    except Exception:  # unreadable or not YAML: the kind's own loader says how
        data = None
    keys = set(data) if isinstance(data, dict) else set()
    scores = {kind: len(keys & top_keys(kind)) for kind in KINDS}
    best = max(scores.values()) if scores else 0
    winners = [k for k, s in scores.items() if s == best and s > 0]
    if len(winners) == 1:
        return winners[0], ""
    named = [k for k in KINDS if k in path.name.lower()]  # agent.yaml, notifier-production.yaml, ...
    if len(named) == 1 and (not winners or named[0] in winners):
        return named[0], ""
    return None, "cannot tell the kind of this file: give --kind " + "|".join(KINDS)


def _notifier(path: Path) -> Checked:
    from tailhound.notifier.config_check import check_file, is_error, label_space

    space, _ = label_space(default_rules_dir())
    checked = check_file(path, space)
    return Checked(
        str(path),
        "notifier",
        [p for p in checked.problems if is_error(p)],
        [p for p in checked.problems if not is_error(p)],
    )


def _rules(path: Path) -> Checked:
    from tailhound.streams.ruleset.check import check_paths

    problems, _ = check_paths([path])
    return Checked(str(path), "rules", problems)


def _ingest(path: Path) -> None:
    load_ingest_config(path).receiver_config()  # the token files too, as `tailhound ingest` reads them at start


_LOADERS: dict[str, Callable[[Path], object]] = {
    "agent": load_agent_config,
    "ingest": _ingest,
    "settings": check_settings_file,
    "capacity": load_capacity_file,
}


def check_file(path: Path, kind: str | None = None) -> Checked:
    """Every problem of the config file at `path` (of `kind`, else the kind its keys say)."""
    if not path.is_file():
        return Checked(str(path), kind, [Problem(str(path), None, None, "no such file")])
    if kind is None:
        kind, why = detect_kind(path)
        if kind is None:
            return Checked(str(path), None, [Problem(str(path), None, None, why)])
    if kind == "notifier":
        return _notifier(path)
    if kind == "rules":
        return _rules(path)
    try:
        _LOADERS[kind](path)
    except ConfigFileError as exc:
        return Checked(
            str(path), kind, list(exc.problems) or [Problem(exc.path, exc.line, exc.column, exc.detail, exc.hint)]
        )
    except ConfigError as exc:
        return Checked(str(path), kind, [Problem(str(path), None, None, str(exc))])
    return Checked(str(path), kind)
