"""The Prometheus ingest's deployment (docs/prometheus.md): the Kubernetes ConfigMap, Deployment and Service, the
compose service, and the remote_write block in deploy/prometheus/, each checked against the code that runs it
(ingest.yaml's model, the CLI, the HTTP server's routes, the snippet generator) and, for Prometheus' side, against
promtool. The checks every manifest gets (namespace, images, unprivileged pods, settings names, no secret values)
are test_kubernetes.py's and test_compose.py's, which loop over every workload and compose service."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from tailhound.catalog import default_catalog
from tailhound.ingest.config import IngestServiceConfig, parse_ingest_config
from tailhound.ingest.prometheus_snippet import kept_names, remote_write_snippet
from tests.conftest import require_tool

from .helpers import COMPOSE_FILE, K8S_DIR, ROOT, check_cli_args, compose_interpolate

PROM_DIR = ROOT / "deploy" / "prometheus"
REMOTE_WRITE = PROM_DIR / "remote-write-tailhound.yaml"
MARKER = "# --- generated below this line ---\n"
COMPOSE_INGEST_YAML = ROOT / "deploy" / "compose" / "ingest.yaml"


def _load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def _k8s(kind: str, name: str) -> dict:
    for path in K8S_DIR.glob("*.yaml"):
        for d in _load(path):
            if d.get("kind") == kind and d["metadata"]["name"] == name:
                return d
    raise AssertionError(f"no {kind} {name} in deploy/kubernetes")


def _port(listen: str) -> int:
    return int(listen.rpartition(":")[2])


def uncomment_blocks(text: str, keys: tuple[str, ...]) -> str:
    """`text` with the commented-out top-level blocks `# key:` (and their `#   ...` lines) made live."""
    out, live = [], False
    for line in text.splitlines():
        if re.match(rf"# ({'|'.join(keys)}):", line):
            live = True
            out.append(line[2:])
        elif live and line.startswith("#   "):
            out.append(line[2:])
        else:
            live = False
            out.append(line)
    return "\n".join(out) + "\n"


# --- Kubernetes ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deployment() -> dict:
    return _k8s("Deployment", "tailhound-ingest")


@pytest.fixture(scope="module")
def container(deployment) -> dict:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


@pytest.fixture(scope="module")
def volumes(deployment) -> dict[str, dict]:
    return {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}


def _mount_of(container: dict, path: PurePosixPath) -> dict:
    found = [m for m in container["volumeMounts"] if PurePosixPath(m["mountPath"]) in path.parents]
    assert found, f"nothing is mounted above {path}"
    return max(found, key=lambda m: len(m["mountPath"]))


def _config_path(container: dict) -> PurePosixPath:
    args = container["args"]
    return PurePosixPath(args[args.index("-c") + 1])


@pytest.fixture(scope="module")
def config_text(container, volumes) -> str:
    """The ingest.yaml the pod reads: the ConfigMap key mounted where `-c` points."""
    path = _config_path(container)
    mount = _mount_of(container, path)
    assert mount.get("readOnly") is True
    cm = _k8s("ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    assert cm["metadata"]["name"] == "tailhound-ingest-config"
    key = str(path.relative_to(mount["mountPath"]))
    assert key in cm["data"], f"ConfigMap {cm['metadata']['name']} has no key {key}"
    return cm["data"][key]


@pytest.fixture(scope="module")
def config(config_text) -> IngestServiceConfig:
    return parse_ingest_config(config_text, origin="ingest-configmap.yaml:ingest.yaml")


def test_the_configmap_is_a_valid_ingest_yaml(config, config_text):
    assert config.listen is not None and config.listen.rpartition(":")[0] == "0.0.0.0", (
        "the kubelet and Prometheus reach the pod's address, not its loopback"
    )
    g = config.remote_write.grouping
    assert g.sources.get("dcgm-exporter") == "dcgm" and "node" in g.node_labels
    assert config.federation is None and config.ha is None
    # the commented alternatives (an HA pair, federation) are valid too once uncommented
    alt = parse_ingest_config(uncomment_blocks(config_text, ("ha", "federation")), origin="ingest.yaml (alternatives)")
    assert alt.ha is not None and alt.ha.replica_label == "replica"
    assert alt.federation is not None and alt.federation.grouping.close_on_newer
    assert alt.federation.selectors(default_catalog())


def test_the_deployment_runs_the_real_cli_command(deployment, container):
    assert container["args"][:2] == ["ingest", "-c"] and "command" not in container
    check_cli_args(container["args"])
    # one process gets every sample of a scrape (grouping and deltas are in memory): never two pods at once
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_the_port_is_the_listen_port_and_the_probes_are_the_servers(container, config, deployment):
    from tailhound.ingest.metrics import IngestMetrics
    from tailhound.ingest.server import IngestServer, make_app

    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": _port(config.listen)} and ports["http"] == 9097
    server = IngestServer(
        IngestMetrics(), max_body_bytes=1024, max_in_flight=1, retry_after_s=5, readiness=lambda: (True, "ready")
    )

    async def accept(body, headers):  # pragma: no cover - routes only
        raise AssertionError

    routes = {(r.method, r.resource.canonical) for r in make_app(config.path, accept, server).router.routes()}
    assert ("POST", config.path) in routes
    expected = {"startupProbe": "/-/healthy", "livenessProbe": "/-/healthy", "readinessProbe": "/-/ready"}
    for kind, path in expected.items():
        probe = container[kind]["httpGet"]
        assert probe == {"path": path, "port": "http"} and ("GET", path) in routes, kind
        assert container[kind]["timeoutSeconds"] < container[kind]["periodSeconds"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9097" and annotations["prometheus.io/path"] == "/metrics"
    assert ("GET", "/metrics") in routes


def test_the_token_file_is_the_secrets_ingest_token(container, volumes, config, tmp_path):
    """auth.bearer_token_file lies on a Secret volume holding tailhound-secrets' key ingest-token (the example
    Secret has it), not optional: the pod does not start open to anyone."""
    token = PurePosixPath(str(config.auth.bearer_token_file))
    mount = _mount_of(container, token)
    assert mount.get("readOnly") is True
    secret = volumes[mount["name"]]["secret"]
    (secret_example,) = _load(K8S_DIR / "secret.example.yaml")
    assert secret["secretName"] == secret_example["metadata"]["name"]
    assert secret.get("optional", False) is False
    items = {i["path"]: i["key"] for i in secret["items"]}
    assert items == {str(token.relative_to(mount["mountPath"])): "ingest-token"}
    assert "ingest-token" in secret_example["stringData"]
    assert not config.auth.bearer_token_files and not config.auth.basic_auth_password_files
    # the Secret's value as the kubelet writes it (no newline) is one accepted token
    f = tmp_path / "token"
    f.write_text(secret_example["stringData"]["ingest-token"], encoding="utf-8")
    local = config.model_copy(update={"auth": config.auth.model_copy(update={"bearer_token_file": f})})
    tokens = local.receiver_config(env={}).bearer_tokens
    assert [t.get_secret_value() for t in tokens] == [secret_example["stringData"]["ingest-token"]]


def test_the_spill_file_is_on_a_writable_volume(container, volumes, config):
    spill = config.publish.buffer.spill_file
    assert spill is not None, "the outbox should keep what Kafka did not take at SIGTERM"
    mount = _mount_of(container, PurePosixPath(str(spill)))
    assert not mount.get("readOnly") and "emptyDir" in volumes[mount["name"]]


def test_the_service_is_the_url_prometheus_writes_to(deployment, config):
    svc = _k8s("Service", "tailhound-ingest")
    assert svc["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] == "http" and port["port"] == _port(config.listen)
    url = urlsplit(_snippet_url())
    assert url.scheme == "http" and url.path == config.path
    assert url.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc" and url.port == port["port"]


# --- deploy/prometheus: the remote_write block ---------------------------------------------------------------------
def _generated() -> str:
    text = REMOTE_WRITE.read_text(encoding="utf-8")
    assert MARKER in text, f"{REMOTE_WRITE.name} lost its marker line {MARKER.strip()!r}"
    header, generated = text.split(MARKER, 1)
    assert all(line.startswith("#") for line in header.splitlines()), "only comments above the marker"
    return generated


def _snippet_url() -> str:
    (rw,) = yaml.safe_load(_generated())["remote_write"]
    return rw["url"]


def test_the_remote_write_file_is_what_tailhound_prints(config):
    """`tailhound ingest -c <the ConfigMap's ingest.yaml> --prometheus-config --url URL`, byte for byte: a change
    to the ConfigMap (settle_s, auth, node labels) or to the signal catalog makes this fail until regenerated."""
    expected = remote_write_snippet(_snippet_url(), config)
    assert _generated() == expected, f"{REMOTE_WRITE.relative_to(ROOT)} drifted: regenerate it as its header says"
    assert f"--url {_snippet_url()}" in REMOTE_WRITE.read_text(encoding="utf-8").split(MARKER)[0]


def test_the_remote_write_block_keeps_what_tailhound_reads_and_asks_for_the_token(config):
    (rw,) = yaml.safe_load(_generated())["remote_write"]
    assert rw["authorization"]["credentials_file"] and "credentials" not in rw["authorization"]
    batch = float(rw["queue_config"]["batch_send_deadline"].removesuffix("s"))
    assert batch <= config.remote_write.grouping.settle_s / 2
    (keep,) = rw["write_relabel_configs"]
    assert keep["source_labels"] == ["__name__", "job"] and keep["action"] == "keep"
    regex, sep = re.compile(keep["regex"]), keep["separator"]
    names = kept_names()
    assert "up" in names and "DCGM_FI_DEV_GPU_TEMP" in names and "vllm:num_requests_waiting" in names
    assert all(regex.fullmatch(f"{n}{sep}dcgm-exporter") for n in names)
    for other in ("go_goroutines", "node_cpu_seconds_total", "DCGM_FI_DEV_GPU_TEMP_extra", "process_cpu_seconds_total"):
        assert not regex.fullmatch(f"{other}{sep}dcgm"), other
    # `up` of the ConfigMap's mapped jobs and the catalog's sources only, not of every job Prometheus scrapes
    assert all(regex.fullmatch(f"up{sep}{job}") for job in config.remote_write.grouping.sources)
    assert not regex.fullmatch(f"up{sep}kubernetes-pods")


def test_promtool_accepts_a_prometheus_yml_with_the_block(tmp_path):
    """deploy/prometheus/prometheus.yml (tailhound's scrape configs, its alerts) with this remote_write merged in."""
    promtool = require_tool("promtool", "apt-get install prometheus")
    (base,) = _load(PROM_DIR / "prometheus.yml")
    merged = {**base, "remote_write": yaml.safe_load(_generated())["remote_write"]}
    for rule_file in base.get("rule_files", []):
        (tmp_path / rule_file).write_text((PROM_DIR / rule_file).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(merged, sort_keys=False), encoding="utf-8")
    proc = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ... and the file as shipped, on its own
    (tmp_path / REMOTE_WRITE.name).write_text(REMOTE_WRITE.read_text(encoding="utf-8"), encoding="utf-8")
    proc = subprocess.run(
        [promtool, "check", "config", REMOTE_WRITE.name], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- docker compose ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def raw_compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def _ingest_service(raw_compose: dict, shell: dict[str, str]) -> dict:
    return compose_interpolate(raw_compose, shell)["services"]["ingest"]


def _compose_config_file(service: dict) -> Path:
    cmd = service["command"]
    target = cmd[cmd.index("-c") + 1]
    (volume,) = [v for v in service["volumes"] if v.split(":")[1] == target]
    assert volume.endswith(":ro"), "mount ingest.yaml read-only"
    return (ROOT / volume.split(":")[0]).resolve()


def test_compose_ingest_service(raw_compose):
    service = _ingest_service(raw_compose, {})
    assert service["profiles"] == ["prometheus"], "opt-in: a fresh `docker compose up` runs kafka and the worker"
    check_cli_args(service["command"])
    path = _compose_config_file(service)
    assert path == COMPOSE_INGEST_YAML.resolve()
    cfg = parse_ingest_config(path.read_text(encoding="utf-8"), origin=str(path))
    ports = [p.split(":") for p in service["ports"]]
    assert ports == [["127.0.0.1", str(_port(cfg.listen)), str(_port(cfg.listen))]], "the host's loopback only"
    assert cfg.listen.rpartition(":")[0] == "0.0.0.0", "published ports reach the container's address"
    # the token: auth.bearer_token_env, passed through from the shell (no value in the file)
    env = service["environment"]
    assert cfg.auth.bearer_token_env in env and env[cfg.auth.bearer_token_env] is None
    assert cfg.auth.bearer_token_file is None and not cfg.auth.bearer_token_files
    assert cfg.receiver_config(env={}).bearer_tokens == ()
    tokens = cfg.receiver_config(env={cfg.auth.bearer_token_env: "s3cret"}).bearer_tokens
    assert [t.get_secret_value() for t in tokens] == ["s3cret"]


def test_compose_ingest_yaml_can_be_replaced(raw_compose):
    other = "./deploy/kubernetes/ingest-configmap.yaml"  # any file: the mount follows INGEST_YAML
    service = _ingest_service(raw_compose, {"INGEST_YAML": other})
    assert _compose_config_file(service) == (ROOT / other).resolve()


def test_deploy_readme_describes_the_new_files():
    text = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    for name in (
        "ingest-deployment.yaml",
        "ingest-service.yaml",
        "ingest-configmap.yaml",
        "remote-write-tailhound.yaml",
        "compose/ingest.yaml",
        "prometheus.md",
    ):
        assert name in text, f"deploy/README.md does not mention {name}"
