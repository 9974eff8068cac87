"""The notifier's documentation stays true: docs/notifier.md covers every config field and setting with
its default, its YAML and CLI examples are valid, the example configs load and route as documented, and
docs/examples/incident_consumer.py works against the real broker."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tailhound.incident import IncidentEvent, Scope
from tailhound.notifier import config as config_module
from tailhound.notifier.config import NotifierConfig, load_config, parse_config
from tailhound.notifier.matchers import incident_labels
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.receivers.console import ConsoleConfig
from tailhound.notifier.receivers.pagerduty import PagerDutyConfig
from tailhound.notifier.receivers.slack import SlackConfig
from tailhound.notifier.receivers.webhook import WebhookConfig
from tailhound.notifier.stages.route import receivers_for
from tailhound.settings import NotifierSettings, bootstrap_servers
from tailhound.vocabulary import ROOT_CAUSES
from tests.deploy.helpers import SECRET_ENV, check_settings_env_name
from tests.kafka_helpers import publish_incidents

from .factories import T0, incident_event

ROOT = Path(__file__).resolve().parents[2]
NOTIFIER_MD = ROOT / "docs" / "notifier.md"
TOPIC_MD = ROOT / "docs" / "incident-topic.md"
WEBHOOKS_MD = ROOT / "docs" / "webhooks.md"
CONSUMER = ROOT / "docs" / "examples" / "incident_consumer.py"
EXAMPLE = ROOT / "tailhound" / "examples" / "notifier-production.yaml"
DEV = ROOT / "tailhound" / "examples" / "notifier.yaml"
OUR_DOCS = [NOTIFIER_MD, TOPIC_MD]


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- markdown helpers ------------------------------------------------------------------------------
def table_rows(markdown: str) -> dict[str, list[str]]:
    """First cell (a `code` name) -> the row's other cells, for every table row that starts with one."""
    rows = {}
    for line in markdown.splitlines():
        m = re.match(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows.setdefault(m.group(1), [c.strip() for c in m.group(2).split("|")])
    return rows


def section(markdown: str, heading: str) -> str:
    """The text under the heading line `heading` up to the next heading of the same or a higher level."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    end = next((i for i in range(start + 1, len(lines)) if re.match(rf"^#{{1,{level}}} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def code_blocks(markdown: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", markdown, flags=re.S | re.M)


# --- config fields and their defaults --------------------------------------------------------------
def default_forms(value: object) -> set[str] | None:
    """How a default may be written in the Default column (None: not checked)."""
    if value is None:
        return {"unset"}
    if isinstance(value, bool):
        return {f"`{str(value).lower()}`"}
    if isinstance(value, int | float):
        v = float(value)
        forms = {f"{v:g}", f"{v:g}s"}
        for unit, size in (("m", 60), ("h", 3600), ("d", 86400)):
            if v and v % size == 0:
                forms.add(f"{v / size:g}{unit}")
        return {f"`{f}`" for f in forms}
    if isinstance(value, str):
        return {f"`{value}`"}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {f"`[{', '.join(value)}]`"}
    if value == {}:
        return {"`{}`"}
    return None


def field_default(info: FieldInfo) -> object:
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def config_fields(
    model: type[BaseModel] = NotifierConfig, prefix: str = "", seen: frozenset[type] = frozenset()
) -> list[tuple[str, FieldInfo]]:
    """Every field of the notifier config models as its documented path (``delivery.backoff.max``,
    ``inhibit_rules[].equal``, ``route.continue``), walking the models defined in notifier/config.py."""
    out = []
    for name, info in model.model_fields.items():
        path = prefix + (info.alias or name)
        out.append((path, info))
        ann = info.annotation
        args = typing.get_args(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            inner, sub = ann, path + "."
        elif typing.get_origin(ann) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            inner, sub = args[0], path + "[]."
        else:
            continue
        if inner.__module__ == config_module.__name__ and inner not in seen:
            out.extend(config_fields(inner, sub, seen | {model, inner}))
    return out


def check_rows(rows: dict[str, list[str]], fields: list[tuple[str, FieldInfo]], where: str) -> None:
    for path, info in fields:
        assert path in rows, f"{where}: no table row for `{path}`"
        default_cell = rows[path][0]
        if info.is_required():
            assert "required" in default_cell, f"{where}: `{path}` is required; its row says {default_cell!r}"
            continue
        forms = default_forms(field_default(info))
        if forms is not None:
            assert any(f in default_cell for f in forms), (
                f"{where}: `{path}` defaults to {field_default(info)!r}; the row says {default_cell!r} "
                f"(write one of {sorted(forms)})"
            )


def test_config_fields_are_documented_with_their_defaults():
    fields = config_fields()
    paths = {p for p, _ in fields}
    assert {
        "grouping.by",
        "delivery.backoff.jitter",
        "route.continue",
        "inhibit_rules[].equal",
        "maintenance[].ends_at",
        "links",
    } <= paths
    check_rows(table_rows(section(text(NOTIFIER_MD), "## Configuration reference")), fields, "notifier.md")


@pytest.mark.parametrize("model", [ConsoleConfig, SlackConfig, PagerDutyConfig], ids=lambda m: m.__name__)
def test_receiver_fields_are_documented_with_their_defaults(model):
    kind = typing.get_args(model.model_fields["type"].annotation)[0]
    rows = table_rows(section(text(NOTIFIER_MD), f"### `{kind}`"))
    check_rows(rows, list(model.model_fields.items()), f"notifier.md, receiver {kind}")


def test_webhook_fields_are_documented_in_webhooks_md():
    rows = table_rows(text(WEBHOOKS_MD))
    for name in WebhookConfig.model_fields:
        assert name in rows, f"webhooks.md has no row for the webhook receiver's `{name}`"
    assert "(webhooks.md)" in section(text(NOTIFIER_MD), "### `webhook`")


def test_settings_are_documented_with_env_names_and_defaults():
    rows = table_rows(section(text(NOTIFIER_MD), "### Settings"))
    for name, info in NotifierSettings.model_fields.items():
        path = f"notifier.{name}"
        assert path in rows, f"notifier.md: no settings row for `{path}`"
        env = f"TAILHOUND_NOTIFIER__{name.upper()}"
        assert f"`{env}`" in rows[path][0], f"`{path}`: the env column should name {env}"
        check_settings_env_name(env)
        forms = default_forms(field_default(info))
        assert forms is not None and any(f in rows[path][1] for f in forms), (path, rows[path][1])


def test_every_env_name_in_the_docs_is_a_setting_or_a_secret():
    for doc in OUR_DOCS:
        for name in set(re.findall(r"\bTAILHOUND_[A-Z0-9_]+", text(doc))):
            if name not in SECRET_ENV:
                check_settings_env_name(name)


def test_matcher_labels_are_documented():
    ev = incident_event(labels={}, scope=Scope(node="n", gpus=["1"], engine="e", model="m", endpoint="p"))
    labels = set(incident_labels(ev))
    rows = table_rows(section(text(NOTIFIER_MD), "## Matchers and incident labels"))
    assert labels <= set(rows), f"undocumented incident labels: {sorted(labels - set(rows))}"
    assert "`rules`" in section(text(NOTIFIER_MD), "## Matchers and incident labels")


# --- examples in the docs ----------------------------------------------------------------------------
def _route_receivers(route: dict) -> set[str]:
    out = {route["receiver"]} if route.get("receiver") else set()
    for child in route.get("routes") or []:
        out |= _route_receivers(child)
    return out


def test_yaml_examples_in_the_docs_are_valid_config():
    """Snippets are checked against the schema; a snippet that shows only routes (or only receivers)
    gets console receivers for the names it uses (or a route to its first receiver)."""
    blocks = code_blocks(text(NOTIFIER_MD), "yaml")
    assert len(blocks) >= 3
    for block in blocks:
        data = yaml.safe_load(block)
        if "route" in data and "receivers" not in data:
            data["receivers"] = [{"type": "console", "name": n} for n in sorted(_route_receivers(data["route"]))]
        if "receivers" in data and "route" not in data:
            data["route"] = {"receiver": data["receivers"][0]["name"]}
        NotifierConfig.model_validate(data)


def _parse_cli(args: list[str]) -> None:
    """Parse `tailhound <args>` with the real CLI (groups and their commands), running nothing."""
    from tailhound.cli import app

    cmd = typer.main.get_command(app)
    rest = list(args)
    while hasattr(cmd, "list_commands"):  # a group (typer may bring its own copy of click)
        assert rest, f"tailhound {' '.join(args)}: a subcommand is missing"
        sub = cmd.get_command(cmd.context_class(cmd), rest[0])
        assert sub is not None, f"tailhound {' '.join(args)}: no command {rest[0]!r}"
        cmd, rest = sub, rest[1:]
    with cmd.make_context("tailhound", rest):  # raises click.UsageError on unknown options / bad values
        pass


def documented_commands(markdown: str) -> list[list[str]]:
    out = []
    for block in code_blocks(markdown, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            for command in _shell_commands(shlex.split(line, comments=True)):
                if "tailhound" in command:
                    out.append(command[command.index("tailhound") + 1 :])
    return out


SHELL_OPERATORS = {"&&", "||", "|", ";", "&"}


def _shell_commands(words: list[str]) -> list[list[str]]:
    """The simple commands of one shell line: split at `&&`, `|`, `;`, with redirections (`> file`) left out."""
    commands, current, skip = [], [], False
    for word in words:
        if skip:
            skip = False
        elif word in SHELL_OPERATORS:
            commands.append(current)
            current = []
        elif word in (">", ">>", "<", "2>", "2>&1") or word.startswith((">", "2>")):
            skip = word in (">", ">>", "<", "2>")
        else:
            current.append(word)
    return [c for c in [*commands, current] if c]


@pytest.mark.parametrize("doc", OUR_DOCS, ids=lambda p: p.name)
def test_cli_examples_in_the_docs_parse(doc):
    commands = documented_commands(text(doc))
    for args in commands:
        _parse_cli(args)
    if doc == NOTIFIER_MD:
        assert {tuple(a[:2]) for a in commands} >= {
            ("silence", "add"),
            ("silence", "list"),
            ("silence", "expire"),
            ("incidents", "list"),
            ("incidents", "show"),
            ("notifier", "check"),
        }


@pytest.mark.parametrize("doc", [*OUR_DOCS, CONSUMER], ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text(doc)) + re.findall(r"(docs/[\w./-]+\.md)", text(doc)):
        if "://" in target:
            continue
        base = ROOT if target.startswith("docs/") else doc.parent
        assert (base / target).exists(), f"{doc.name}: broken link {target}"


# --- the example configs -----------------------------------------------------------------------------
def uncommented(path: Path) -> str:
    """The file with its commented-out YAML lines (``# key: ...``, ``# - ...``) switched on; prose comments
    start with a capital letter or a non-YAML word and stay comments."""
    out = []
    for line in text(path).splitlines():
        m = re.match(r"^(\s*)# (\s*(?:- |[a-z_]+:(?: |$)).*)$", line)
        out.append(m.group(1) + m.group(2) if m else line)
    return "\n".join(out) + "\n"


def test_dev_config_is_the_builtin_defaults():
    """./notifier.yaml is what the demo and a dev worker read: console only, no secrets, and nothing
    that changes behaviour compared with having no file."""
    assert load_config(DEV) == NotifierConfig()


@pytest.mark.parametrize("path", [DEV, EXAMPLE], ids=lambda p: p.name)
def test_commented_examples_in_the_configs_are_valid(path):
    on = parse_config(uncommented(path), origin=f"{path.name} (uncommented)")
    off = load_config(path)
    assert on != off, f"{path.name}: nothing was uncommented"
    if path == EXAMPLE:
        assert len(on.maintenance) == 1 and not off.maintenance
    else:
        assert {r.type for r in on.receivers} == {"console", "slack", "pagerduty"}


def _labels(**over: object) -> dict[str, str]:
    return incident_labels(incident_event(**over))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def example() -> NotifierConfig:
    return load_config(EXAMPLE)


def test_example_groups_by_root_cause_and_node_and_uses_env_secrets(example):
    assert example.grouping.by == ["root_cause", "node"]
    assert {r.type for r in example.receivers} == {"slack", "pagerduty", "webhook"}
    raw = text(EXAMPLE)
    assert re.findall(r"\{env: (\w+)\}", raw) and "{file:" not in raw


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (dict(severity="critical"), ["pagerduty", "slack"]),
        (dict(severity="critical", transient=True, root_cause="ingress-saturation"), ["slack"]),
        (dict(severity="warning", root_cause="capacity"), ["remediate", "slack"]),
        (dict(severity="critical", root_cause="capacity"), ["pagerduty", "remediate", "slack"]),
        (dict(severity="warning"), ["slack"]),
    ],
    ids=["critical-persistent", "critical-transient", "capacity", "critical-capacity", "warning"],
)
def test_example_routes_as_documented(example, labels, expected):
    assert receivers_for(example.route, _labels(**labels)) == expected


def _sent(nf: Notifier, now: float) -> list:
    out = nf.flush(now).created
    for gid, name, n, _ in nf.deliverable(now):
        nf.delivered(gid, name, n.sequence, {}, now)
    return out


def test_example_inhibits_endpoint_symptoms_of_a_network_path_incident(example):
    nf = Notifier(example)
    cause = incident_event(
        incident_id="inc-000000000000000a",
        root_cause="network-path",
        scope=Scope(node="lb-1", endpoint="api.example.com"),
    )
    symptom = incident_event(
        incident_id="inc-000000000000000b",
        root_cause="capacity",
        scope=Scope(node="gpu-node-1", endpoint="api.example.com"),
    )
    elsewhere = incident_event(
        incident_id="inc-000000000000000c", root_cause="capacity", scope=Scope(node="gpu-node-2", engine="vllm-0")
    )  # no endpoint: not inhibited
    nf.ingest([cause, symptom, elsewhere], T0)
    out = _sent(nf, T0 + 31)
    assert {n.group_id for n in out} == {cause.incident_id, elsewhere.incident_id}
    assert nf.groups[symptom.incident_id].suppressed == f"inhibited by {cause.incident_id}"


def test_example_transient_incident_pages_once_it_becomes_persistent(example):
    nf = Notifier(example)
    nf.ingest([incident_event(severity="critical", transient=True)], T0)
    assert sorted(n.receiver for n in _sent(nf, T0 + 31)) == ["slack"]
    nf.ingest([incident_event(event="updated", sequence=2, severity="critical", transient=False)], T0 + 600)
    assert _sent(nf, T0 + 600) == []  # a change waits grouping.wait too (changes that come together: one message)
    out = _sent(nf, T0 + 631)
    assert sorted((n.receiver, n.kind) for n in out) == [("pagerduty", "opened"), ("slack", "updated")]


def test_example_resolve_waits_min_flip_interval_and_goes_where_the_page_went(example):
    nf = Notifier(example)
    nf.ingest([incident_event(severity="critical")], T0)
    assert sorted(n.receiver for n in _sent(nf, T0 + 31)) == ["pagerduty", "slack"]
    nf.ingest([incident_event(event="resolved", sequence=2, severity="warning")], T0 + 100)
    assert _sent(nf, T0 + 100 + example.flap.min_flip_interval - 1) == []
    out = _sent(nf, T0 + 100 + example.flap.min_flip_interval)
    assert sorted((n.receiver, n.kind) for n in out) == [("pagerduty", "resolved"), ("slack", "resolved")]


# --- the incident topic doc ---------------------------------------------------------------------------
def test_incident_topic_doc_covers_every_field_and_root_cause():
    doc = text(TOPIC_MD)
    rows = table_rows(doc)
    for name in IncidentEvent.model_fields:
        assert name in rows, f"incident-topic.md: no row for field `{name}`"
    causes = table_rows(section(doc, "## Root causes"))
    assert set(causes) == {str(t) for t in ROOT_CAUSES}, "the root-cause table differs from tailhound/vocabulary.py"
    for tag, info in ROOT_CAUSES.items():
        assert causes[str(tag)] == [info.title, "yes" if info.usually_transient else "no"], tag


# --- the example consumer against the real broker -----------------------------------------------------
async def _run_consumer(settings, *flags: str, timeout: float = 90.0) -> list[str]:
    args = [
        sys.executable,
        str(CONSUMER),
        "--bootstrap",
        ",".join(bootstrap_servers(settings.broker)),
        "--topic",
        settings.incidents_topic,
        *flags,
    ]
    proc = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def _lifecycle() -> list[IncidentEvent]:
    a, b = "inc-00000000000000aa", "inc-00000000000000bb"
    return [
        incident_event(incident_id=a, severity="critical"),
        incident_event(incident_id=a, severity="critical"),  # redelivered
        incident_event(
            incident_id=b,
            root_cause="network-path",
            transient=True,
            ts=T0 + 5,
            scope=Scope(node="gpu-node-1", endpoint="api.example.com"),
        ),
        incident_event(incident_id=a, event="updated", sequence=2, severity="critical", ts=T0 + 60),
        incident_event(incident_id=a, severity="critical"),  # stale, after a newer one
        incident_event(incident_id=a, event="resolved", sequence=3, severity="critical", ts=T0 + 600),
        incident_event(
            incident_id=b,
            event="resolved",
            sequence=2,
            root_cause="network-path",
            transient=True,
            ts=T0 + 120,
            scope=Scope(node="gpu-node-1", endpoint="api.example.com"),
        ),
    ]


@pytest.mark.broker
async def test_example_consumer_prints_each_step_once(settings):
    await publish_incidents(settings, *_lifecycle())
    lines = await _run_consumer(settings, "--until-idle", "5")
    steps = [line.split()[1:4] for line in lines]
    assert steps == [
        ["inc-00000000000000aa", "#1", "opened"],
        ["inc-00000000000000bb", "#1", "opened"],
        ["inc-00000000000000aa", "#2", "updated"],
        ["inc-00000000000000aa", "#3", "resolved"],
        ["inc-00000000000000bb", "#2", "resolved"],
    ], lines
    assert lines[0].startswith(
        "2026-09-21T14:13:20Z inc-00000000000000aa #1 opened   critical gpu-thermal-throttle "
        "on node gpu-node-3 / GPUs 2 / model llama-3-70b / engine vllm-0 (persistent): "
    )
    assert "network-path on node gpu-node-1 / endpoint api.example.com (transient)" in lines[1]

    # a bounded run without --until-idle stops after --max-events
    assert [line.split()[1:4] for line in await _run_consumer(settings, "--max-events", "2")] == steps[:2]
