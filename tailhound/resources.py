"""Files that ship inside the package: the default rule pack and the example configs.

In an installed wheel they live in the package (``tailhound/rules/``, ``tailhound/examples/``); in a
checkout the rule pack is the repository's top-level ``rules/`` folder, which pyproject.toml maps to
``tailhound.rules`` when it builds the wheel. Either way these functions return a real directory, so
the rest of the code reads them like any user-given path.
"""

from __future__ import annotations

from pathlib import Path

from tailhound.errors import ConfigError

_PACKAGE = Path(__file__).resolve().parent

#: name -> (file, what it is), listed by ``tailhound example``
EXAMPLES: dict[str, tuple[str, str]] = {
    "notifier": ("notifier.yaml", "notifier config for development: every incident on the console, no secrets"),
    "notifier-production": (
        "notifier-production.yaml",
        "notifier config with Slack, PagerDuty and a signed remediation webhook (secrets from env)",
    ),
    "agent": ("agent.yaml", "node agent config: NVML, engine and dcgm-exporter scrapes, network probes"),
    "ingest": ("ingest.yaml", "Prometheus ingest config: remote write on loopback, optional federation"),
}


def default_rules_dir() -> Path:
    """The bundled rule pack: the default when no rules directory is given."""
    for candidate in (_PACKAGE / "rules", _PACKAGE.parent / "rules"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise ConfigError(f"the bundled rule pack is missing (looked in {_PACKAGE / 'rules'}): reinstall tailhound")


def examples_dir() -> Path:
    return _PACKAGE / "examples"


def example_path(name: str) -> Path:
    """The bundled example config `name` (see :data:`EXAMPLES`)."""
    if name not in EXAMPLES:
        raise ConfigError(f"no example named {name!r}; there are: {', '.join(EXAMPLES)}")
    return examples_dir() / EXAMPLES[name][0]


def default_notifier_config() -> Path:
    """The notifier config used when none is given: console only, the built-in defaults written out."""
    return example_path("notifier")
