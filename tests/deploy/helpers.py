"""Helpers for the deploy tests: repo paths, the CLI's commands, the settings' env names, quantities."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import typer
from pydantic import BaseModel

from tailhound.notifier.config import NotifierConfig
from tailhound.notifier.secrets import SecretRef
from tailhound.settings import CONFIG_ENV, Settings

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "rules"
K8S_DIR = ROOT / "deploy" / "kubernetes"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
#: The notifier configs: the dev/demo default (console only) and the production example.
NOTIFIER_DEV = ROOT / "tailhound" / "examples" / "notifier.yaml"
NOTIFIER_EXAMPLE = ROOT / "tailhound" / "examples" / "notifier-production.yaml"

#: Credentials: only ever from a Secret (k8s) or the caller's environment (compose), never literal.
#: the notifier receivers' secrets (the example production notifier config names them) ...
RECEIVER_SECRET_ENV = {"TAILHOUND_SLACK_BOT_TOKEN", "TAILHOUND_PAGERDUTY_ROUTING_KEY", "TAILHOUND_WEBHOOK_SECRET"}
#: ... and every secret the worker takes: those and the notifier API's (and incident console's) token
SECRET_ENV = RECEIVER_SECRET_ENV | {"TAILHOUND_NOTIFIER__API_TOKEN"}
#: ... and the Prometheus ingest's: the bearer token Prometheus sends (ingest.yaml auth.bearer_token_env; not a
#: setting: the ingest reads it itself, compose passes it through from the shell)
INGEST_SECRET_ENV = {"TAILHOUND_INGEST_TOKEN"}
SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|ROUTING_KEY|API_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)


# --- CLI ------------------------------------------------------------------------------------------
def cli_command_names() -> set[str]:
    from tailhound.cli import app

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups if g.name}
    return names


def check_cli_args(args: list[str]) -> None:
    """Parse `args` (after the `tailhound` entrypoint) with the real CLI, without running anything."""
    from tailhound.cli import app

    group = typer.main.get_command(app)
    assert args, "no subcommand given"
    name, rest = args[0], list(args[1:])
    assert name in cli_command_names(), f"{name!r} is not a tailhound subcommand ({sorted(cli_command_names())})"
    cmd = group.get_command(group.make_context("tailhound", [name], resilient_parsing=True), name)
    assert cmd is not None
    with cmd.make_context(name, rest) as ctx:  # raises click.UsageError on unknown options / bad values
        assert ctx.params is not None


# --- settings ---------------------------------------------------------------------------------------
def check_settings_env_name(name: str) -> None:
    """`TAILHOUND_FOO__BAR` must name a real field path of Settings (TAILHOUND_CONFIG is the file)."""
    assert name.startswith("TAILHOUND_"), name
    if name == CONFIG_ENV:
        return
    model: type[BaseModel] | None = Settings
    path = name.removeprefix("TAILHOUND_").lower().split("__")
    for i, seg in enumerate(path):
        assert model is not None, f"{name}: {'.'.join(path[:i])} has no sub-fields"
        fields = list(model.model_fields)
        assert seg in fields, f"{name}: {seg!r} is not a field of {model.__name__} ({fields})"
        ann = model.model_fields[seg].annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


# --- Kubernetes quantities -----------------------------------------------------------------------
_SUFFIX = {
    "m": 1e-3,
    "": 1,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity(q: str | int | float) -> float:
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(q))
    assert m, f"not a Kubernetes quantity: {q!r}"
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


# --- Dockerfile --------------------------------------------------------------------------------------
@dataclass
class Dockerfile:
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, rest)

    def all(self, name: str) -> list[str]:
        return [rest for ins, rest in self.instructions if ins == name]

    def exec_form(self, name: str) -> list[str] | None:
        found = self.all(name)
        if not found:
            return None
        rest = found[-1]  # the last one wins (in the final stage)
        return json.loads(rest) if rest.startswith("[") else ["/bin/sh", "-c", rest]


def parse_dockerfile(path: Path = DOCKERFILE) -> Dockerfile:
    out = Dockerfile()
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # comment inside a continued instruction
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        ins, _, rest = logical.partition(" ")
        out.instructions.append((ins.upper(), rest.strip()))
        logical = ""
    return out


def copy_sources(rest: str) -> tuple[list[str], dict[str, str]]:
    """Sources and --flags of a COPY/ADD instruction (shell or JSON form)."""
    flags: dict[str, str] = {}
    while m := re.match(r"--([\w-]+)(?:=(\S*))?\s+", rest):
        flags[m.group(1)] = m.group(2) or ""
        rest = rest[m.end() :]
    parts = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    assert len(parts) >= 2, f"COPY needs a source and a destination: {rest!r}"
    return parts[:-1], flags


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def dockerignored(relpath: str, patterns: Iterable[str] | None = None) -> bool:
    """Approximates Docker's matcher: later patterns win, `!` re-includes, a match on a parent dir counts."""
    pats = list(dockerignore_patterns() if patterns is None else patterns)
    parts = Path(relpath).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pat in pats:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.strip("/")
        variants = {p}
        if p.startswith("**/"):
            variants.add(p[3:])
        if any(fnmatch.fnmatchcase(c, v) for c in candidates for v in variants):
            excluded = not neg
    return excluded


# --- docker compose interpolation ------------------------------------------------------------------
_COMPOSE_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def compose_interpolate(value: object, env: dict[str, str]) -> object:
    """What Compose makes of a parsed file in a shell whose environment is `env`: ``${VAR}``,
    ``${VAR:-default}`` (default when unset or empty), ``${VAR-default}`` (default when unset), ``$$``."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            name, op, default = m.group(1), m.group(2), m.group(3) or ""
            if op == ":-":
                return env.get(name) or default
            if op == "-":
                return env.get(name, default)
            return env.get(name, "")

        return _COMPOSE_VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: compose_interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [compose_interpolate(v, env) for v in value]
    return value


# --- notifier config ------------------------------------------------------------------------------
def notifier_secret_refs(config: NotifierConfig) -> dict[str, SecretRef]:
    """Every secret reference of the config's receivers, by ``<receiver>.<field>``."""
    out = {}
    for rc in config.receivers:
        for name in type(rc).model_fields:
            value = getattr(rc, name)
            if isinstance(value, SecretRef):
                out[f"{rc.name}.{name}"] = value
    return out
