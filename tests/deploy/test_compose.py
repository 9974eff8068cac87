"""docker-compose.yml, Dockerfile and .dockerignore: parsed and cross-checked against the repo and CLI."""

from __future__ import annotations

import glob
import json
import os
import re
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from tailhound.errors import ConfigError
from tailhound.notifier.config import load_config
from tailhound.notifier.receiver_set import build_receivers
from tailhound.settings import bootstrap_servers, load_settings

from .helpers import (
    COMPOSE_FILE,
    DOCKERFILE,
    INGEST_SECRET_ENV,
    NOTIFIER_DEV,
    NOTIFIER_EXAMPLE,
    ROOT,
    SECRET_ENV,
    SECRETISH,
    check_cli_args,
    check_settings_env_name,
    compose_interpolate,
    copy_sources,
    dockerignored,
    notifier_secret_refs,
    parse_dockerfile,
)

TAILHOUND_SERVICES = ("worker", "simulator", "ingest")


@pytest.fixture(scope="module")
def raw_compose() -> dict:
    """The file as written, ``${VAR}`` references and all."""
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose(raw_compose) -> dict:
    """What `docker compose up` uses in a shell that exports nothing (a fresh checkout)."""
    return compose_interpolate(raw_compose, {})


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def raw_services(raw_compose) -> dict:
    return raw_compose["services"]


def env_of(service: dict) -> dict[str, object]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["A=1", "B"] form
        return {k: (v if sep else None) for k, sep, v in (e.partition("=") for e in env)}
    return dict(env)


def command_of(service: dict) -> list[str]:
    cmd = service.get("command")
    return cmd.split() if isinstance(cmd, str) else list(cmd or [])


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """`PLAINTEXT://:9092,CONTROLLER://host:9093` -> {"PLAINTEXT": ("", 9092), ...}"""
    out = {}
    for item in value.split(","):
        name, _, addr = item.strip().partition("://")
        host, _, port = addr.rpartition(":")
        out[name] = (host, int(port))
    return out


# --- compose: structure ---------------------------------------------------------------------------
def test_compose_spec_has_no_version_key(compose):
    assert "version" not in compose, "the Compose spec dropped the top-level `version:` key"


def test_services_exist(services):
    assert {"kafka", "worker", "simulator"} <= set(services)


@pytest.mark.parametrize("name", TAILHOUND_SERVICES)
def test_tailhound_services_wait_for_a_healthy_kafka(services, name):
    deps = services[name]["depends_on"]
    assert isinstance(deps, dict), "use the long depends_on form so the condition is explicit"
    assert deps["kafka"]["condition"] == "service_healthy"
    assert "healthcheck" in services["kafka"], "service_healthy needs a healthcheck on kafka"


def test_kafka_is_single_node_kraft(services):
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = {k: str(v) for k, v in env_of(kafka).items()}
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    lst = listeners(env["KAFKA_LISTENERS"])
    protocol_map = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller_names = env["KAFKA_CONTROLLER_LISTENER_NAMES"].split(",")
    for name in list(lst) + list(listeners(env["KAFKA_ADVERTISED_LISTENERS"])):
        assert name in protocol_map, f"listener {name} has no security protocol"
    for name in controller_names:
        assert name in lst, f"controller listener {name} is not in KAFKA_LISTENERS"
        assert name not in listeners(env["KAFKA_ADVERTISED_LISTENERS"]), "controllers are not advertised"
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1
    vid, _, vaddr = voters[0].partition("@")
    assert vid == node_id
    assert int(vaddr.rpartition(":")[2]) in {lst[n][1] for n in controller_names}
    # A single broker: internal topics cannot have more replicas than brokers.
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key
    test = kafka["healthcheck"]["test"]
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in " ".join(test if isinstance(test, list) else [test])


def test_kafka_data_dir_is_a_volume(compose, services):
    env = env_of(services["kafka"])
    targets = {v.split(":")[1] for v in services["kafka"].get("volumes", []) if isinstance(v, str)}
    assert env["KAFKA_LOG_DIRS"] in targets


@pytest.mark.parametrize("name", TAILHOUND_SERVICES)
def test_broker_url_is_kafkas_advertised_listener(services, name):
    kafka_env = env_of(services["kafka"])
    advertised = listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    bound = listeners(kafka_env["KAFKA_LISTENERS"])
    kafka_hosts = {"kafka", services["kafka"].get("hostname", "kafka")}
    broker = env_of(services[name])["TAILHOUND_BROKER"]
    for addr in bootstrap_servers(broker):
        host, _, port = addr.rpartition(":")
        assert host in kafka_hosts, f"{name}: {addr} is not the kafka service"
        match = [n for n, (h, p) in advertised.items() if h == host and p == int(port)]
        assert match, f"{name}: {addr} is not an advertised Kafka listener ({advertised})"
        assert bound[match[0]][1] == int(port), f"listener {match[0]} advertises a port it does not bind"


@pytest.mark.parametrize("name", TAILHOUND_SERVICES)
def test_commands_parse_with_the_real_cli(services, name):
    check_cli_args(command_of(services[name]))


def test_simulator_faults_parse(services):
    from tailhound.agents.simulator import FaultSpec

    cmd = command_of(services["simulator"])
    faults = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--fault"]
    faults += [a.split("=", 1)[1] for a in cmd if a.startswith("--fault=")]
    assert faults, "the demo simulator should inject a fault"
    for f in faults:
        FaultSpec.parse(f)


@pytest.mark.parametrize("name", TAILHOUND_SERVICES)
def test_env_names_are_settings_and_values_validate(services, name, monkeypatch):
    env = env_of(services[name])
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if not key.startswith("TAILHOUND_") or key in SECRET_ENV | INGEST_SECRET_ENV:
            continue
        check_settings_env_name(key)
        assert value is not None, f"{key} has no value"
        monkeypatch.setenv(key, str(value))
    load_settings()  # raises ConfigError on a malformed broker URL, partitions, ...


@pytest.mark.parametrize("name", TAILHOUND_SERVICES)
def test_no_literal_secrets_in_compose(raw_services, name):
    for key, value in env_of(raw_services[name]).items():
        if key in SECRET_ENV or SECRETISH.search(key):
            # Pass-through from the caller's shell only: `KEY:` / `- KEY`, or "${KEY}" interpolation.
            assert value is None or re.fullmatch(r"\$\{" + re.escape(key) + r"(:?-)?\}", str(value)), (
                f"{name}: {key} must not have a literal value in docker-compose.yml"
            )


def test_worker_mounts_the_rules(services):
    worker = services["worker"]
    env = env_of(worker)
    mounts = {}
    for v in worker.get("volumes", []):
        src, tgt, *_ = v.split(":")
        mounts[tgt] = src
    rules_src = mounts.get(env["TAILHOUND_RULES_DIR"])
    assert rules_src, "TAILHOUND_RULES_DIR is not a mounted directory"
    assert any(v.endswith(":ro") for v in worker["volumes"] if v.split(":")[1] == env["TAILHOUND_RULES_DIR"])
    src = (ROOT / rules_src).resolve()
    assert src.is_dir() and any(src.glob("*.yaml")), f"{rules_src} has no rule files"
    data_dir = env["TAILHOUND_STREAMS__DATA_DIR"]
    assert any(data_dir == t or data_dir.startswith(t.rstrip("/") + "/") for t in mounts), (
        "the streams data dir should live on a volume"
    )


# --- compose: the notifier ----------------------------------------------------------------------------
def mounts_of(service: dict) -> dict[str, str]:
    """Container path -> host path of the service's bind mounts."""
    out = {}
    for v in service.get("volumes", []):
        src, tgt, *_ = v.split(":")
        if src.startswith((".", "/")):
            out[tgt] = src
    return out


def notifier_file(raw_compose: dict, shell: dict[str, str]) -> Path:
    """The host file the worker's notifier reads when compose runs in a shell exporting `shell`."""
    worker = compose_interpolate(raw_compose, shell)["services"]["worker"]
    target = env_of(worker)["TAILHOUND_NOTIFIER__CONFIG"]
    source = mounts_of(worker).get(target)
    assert source, f"TAILHOUND_NOTIFIER__CONFIG={target} is not a bind-mounted file"
    assert any(v.split(":")[1] == target and v.endswith(":ro") for v in worker["volumes"]), "mount it read-only"
    return (ROOT / source).resolve()


def test_default_notifier_config_needs_no_secrets(raw_compose):
    """A fresh checkout's `docker compose up` must start: tailhound/examples/notifier.yaml, console only."""
    path = notifier_file(raw_compose, {})
    assert path == NOTIFIER_DEV.resolve()
    cfg = load_config(path)
    assert notifier_secret_refs(cfg) == {}
    assert {r.type for r in cfg.receivers} == {"console"}


def test_notifier_yaml_selects_the_production_example(raw_compose):
    path = notifier_file(raw_compose, {"NOTIFIER_YAML": "./tailhound/examples/notifier-production.yaml"})
    assert path == NOTIFIER_EXAMPLE.resolve()
    load_config(path)


@pytest.mark.parametrize("config", [NOTIFIER_DEV, NOTIFIER_EXAMPLE], ids=lambda p: p.name)
def test_every_notifier_secret_is_passed_through_from_the_shell(raw_services, config):
    env = env_of(raw_services["worker"])
    for where, ref in notifier_secret_refs(load_config(config)).items():
        assert ref.env is not None, f"{config.name}: {where} reads a file, which the compose worker does not mount"
        assert ref.env in env, f"{config.name}: {where} needs {ref.env}, which the worker does not get"
        assert env[ref.env] is None, f"{ref.env} must be passed through from the shell, not written here"
        assert ref.env in SECRET_ENV


@pytest.mark.parametrize("config", [NOTIFIER_DEV, NOTIFIER_EXAMPLE], ids=lambda p: p.name)
async def test_the_notifier_starts_with_the_compose_environment(raw_compose, config, monkeypatch):
    """The worker builds every receiver at start: secrets resolved, webhook hosts on the allow-list."""
    cfg = load_config(config)
    hosts = sorted({httpx.URL(r.url).host for r in cfg.receivers if r.type == "webhook"})
    shell = {ref.env: "dummy-" + ref.env.lower() for ref in notifier_secret_refs(cfg).values() if ref.env}
    if hosts:
        shell["TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS"] = json.dumps(hosts)
    worker = compose_interpolate(raw_compose, shell)["services"]["worker"]
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    for key, value in env_of(worker).items():
        value = shell.get(key) if value is None else value  # pass-through: the shell's value, if any
        if value is not None:
            monkeypatch.setenv(key, str(value))
    settings = load_settings()
    assert settings.notifier.enabled and settings.notifier.config is not None
    receivers = build_receivers(settings, cfg)
    try:
        assert set(receivers) == {r.name for r in cfg.receivers}
    finally:
        for r in receivers.values():
            await r.close()
    if hosts:  # ... and without the allow-list exported, the worker refuses to start, naming the webhook
        monkeypatch.setenv(
            "TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS",
            env_of(compose_interpolate(raw_compose, {})["services"]["worker"])[
                "TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS"
            ],
        )
        with pytest.raises(ConfigError, match="not in notifier.webhook_allowed_hosts"):
            build_receivers(load_settings(), cfg)


def test_bind_mounts_exist_and_named_volumes_are_declared(compose, services):
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for v in svc.get("volumes", []):
            src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
            if src.startswith((".", "/")):
                assert (ROOT / src).exists(), f"{name}: bind mount source {src} does not exist"
            else:
                assert src in declared, f"{name}: named volume {src} is not declared"


def test_builds_exist_and_share_one_image(services):
    images = set()
    for name, svc in services.items():
        build = svc.get("build")
        if build is None:
            continue
        ctx = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        assert (ROOT / ctx).is_dir(), f"{name}: build context {ctx} does not exist"
        assert (ROOT / ctx / dockerfile).is_file(), f"{name}: {dockerfile} missing"
        images.add(svc.get("image"))
    assert len(images) == 1 and None not in images, "services built from the Dockerfile should share an image name"
    (image,) = images
    for name in TAILHOUND_SERVICES:
        assert services[name].get("image") == image or "build" in services[name]


# --- Dockerfile ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dockerfile():
    return parse_dockerfile(DOCKERFILE)


def test_dockerfile_entrypoint_and_default_command(dockerfile):
    assert dockerfile.exec_form("ENTRYPOINT") == ["tailhound"]
    cmd = dockerfile.exec_form("CMD")
    assert cmd == ["worker"]
    check_cli_args(cmd)


def test_dockerfile_base_and_user(dockerfile):
    froms = dockerfile.all("FROM")
    assert froms and all("python:" in f for f in froms)
    args = dict(a.split("=", 1) for a in dockerfile.all("ARG") if "=" in a)
    assert args.get("PYTHON_VERSION", "3.11") == "3.11"
    assert all(f.split()[0].replace("${PYTHON_VERSION}", "3.11") == "python:3.11-slim" for f in froms)
    # The final stage runs as a numeric non-root user (so Kubernetes can verify runAsNonRoot).
    final = dockerfile.instructions[max(i for i, (ins, _) in enumerate(dockerfile.instructions) if ins == "FROM") :]
    users = [rest for ins, rest in final if ins == "USER"]
    assert users, "no USER in the final stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_dockerfile_copy_sources_exist_and_are_not_ignored(dockerfile):
    copied = []
    for ins in ("COPY", "ADD"):
        for rest in dockerfile.all(ins):
            sources, flags = copy_sources(rest)
            if "from" in flags:
                continue
            for src in sources:
                matches = glob.glob(str(ROOT / src))
                assert matches, f"{ins} source {src} does not exist"
                copied.append(src)
    assert any(s.rstrip("/") in {"rules", "."} for s in copied), "the image must carry the rule pack"
    for src in copied:
        if src not in {".", "./"}:
            assert not dockerignored(src.rstrip("/")), f"{src} is copied but excluded by .dockerignore"


def test_dockerignore_keeps_the_package_and_drops_local_state():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    needed = [
        "pyproject.toml",
        "LICENSE",
        "rules",
        "rules/gpu.yaml",
        "tailhound",
        "tailhound/catalog",
        "tailhound/examples",
        "agents",
        "streams",
        "notifier",
    ]
    readme = project.get("readme")
    if isinstance(readme, str):
        needed.append(readme)
    for path in needed:
        assert not dockerignored(path), f".dockerignore drops {path}, which the image build needs"
    for path in [".venv", ".git", "tailhound/__pycache__", ".pytest_cache", "tailhound.egg-info", ".tailhound"]:
        assert dockerignored(path), f".dockerignore should exclude {path}"


def test_dockerfile_uses_the_rules_inside_the_package(dockerfile):
    """The image's rule pack is the installed package's (no second copy that could drift from it)."""
    assert "TAILHOUND_RULES_DIR" not in " ".join(dockerfile.all("ENV"))
    for rest in dockerfile.all("COPY"):
        sources, flags = copy_sources(rest)
        assert "from" in flags or not any(s.rstrip("/") == "rules" for s in sources), rest


def test_every_published_port_is_on_the_hosts_loopback(raw_services):
    """Nothing in compose authenticates by default (Kafka, the worker's endpoint, the ingest without a token):
    a port published on 0.0.0.0 would be open to the host's network."""
    for name, svc in raw_services.items():
        for port in svc.get("ports", []):
            spec = port if isinstance(port, dict) else None
            if spec is not None:
                assert spec.get("host_ip") == "127.0.0.1", f"{name}: {port}"
                continue
            parts = str(port).split(":")
            assert len(parts) == 3 and parts[0] == "127.0.0.1", f"{name}: {port!r} is not bound to 127.0.0.1"


def test_dockerfile_exposes_every_process_port(dockerfile):
    """The worker's endpoint, the notifier API/console, the ingest and the agent, from their defaults in the code."""
    from tailhound.agents.config import AgentConfig
    from tailhound.ingest.config import DEFAULT_LISTEN
    from tailhound.settings import NotifierSettings
    from tailhound.streams_settings import StreamsSettings

    def port(listen: str) -> str:
        return listen.rpartition(":")[2]

    wanted = {
        port(StreamsSettings().web_listen),
        port(NotifierSettings().api_listen),
        port(DEFAULT_LISTEN),
        port(AgentConfig.model_fields["listen"].default),
    }
    exposed = {p.split("/")[0] for rest in dockerfile.all("EXPOSE") for p in rest.split()}
    assert exposed == wanted, f"EXPOSE {sorted(exposed)}, the processes serve {sorted(wanted)}"
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "no HTTP endpoint" not in text and "listens on nothing" not in text
    for p in wanted:
        assert re.search(rf"^#\s+{p}\s+\S", text, re.M), f"the Dockerfile does not say what port {p} serves"
