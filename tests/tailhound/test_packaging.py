"""The package as a user installs it: pyproject's layout, declared dependencies, and a built wheel used from
an empty directory in a fresh virtualenv (no checkout on the path)."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.wheel_install import run_checked, session_install

ROOT = Path(__file__).resolve().parents[2]
#: one xdist worker builds the wheel once for this module and tests/docs (tests/wheel_install.py)
pytestmark = pytest.mark.xdist_group("wheel")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGE_DIRS: dict[str, str] = SETUPTOOLS["package-dir"]
DATA_PACKAGES = {"tailhound.rules", "tailhound.rules.tests", "tailhound.examples"}  # YAML only, no __init__.py


def _requirements(*extras: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def _folder(package: str) -> Path:
    """Where `package` lives in the checkout, following package-dir like setuptools does."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in PACKAGE_DIRS:
            return ROOT / PACKAGE_DIRS[head] / Path(*parts[i:])
    raise AssertionError(f"{package} is not under a package-dir entry")


def test_every_package_folder_is_listed_for_the_wheel():
    found = set(DATA_PACKAGES)
    for package, folder in PACKAGE_DIRS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *rel)))
    assert set(SETUPTOOLS["packages"]) == found


def test_package_data_is_in_its_folders():
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        for pattern in patterns:
            assert list(_folder(package).glob(pattern)), f"{package}: nothing matches {pattern}"


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> one file importing it, over every module of the wheel."""
    out: dict[str, str] = {}
    for folder in PACKAGE_DIRS.values():
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in {"tailhound", "__future__"}:
                        out.setdefault(top, str(path.relative_to(ROOT)))
    return out


def test_every_direct_import_is_declared():
    declared = {canonicalize_name(r.name) for r in _requirements("broker", "loadtest", "fit", "brotli")}
    dists = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(_third_party_imports().items()):
        owners = {canonicalize_name(d) for d in dists.get(module, [])}
        assert owners, f"{module} (imported in {where}) is not installed: which distribution provides it?"
        if not owners & declared:
            missing.append(f"{module} ({where}) from {sorted(owners)}")
    assert missing == [], "imported but not declared in pyproject.toml: " + "; ".join(missing)


@pytest.mark.parametrize("req", _requirements("broker", "dev"), ids=str)
def test_zero_major_dependencies_have_an_upper_bound(req):
    lower = [s.version for s in req.specifier if s.operator in (">=", "==", "~=")]
    if lower and lower[0].startswith("0."):
        assert any(s.operator in ("<", "<=", "~=", "==") for s in req.specifier), f"{req}: bound a 0.x dependency"


def test_license_file_is_shipped():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]


# --- the wheel, outside the checkout ---------------------------------------------------------------------


_run = run_checked


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The wheel in a fresh virtualenv (tests/wheel_install.py, built once per session), and an empty dir."""
    return session_install(tmp_path_factory)


def _tailhound(installed: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return _run(
        [str(installed["venv"] / "bin" / "tailhound"), *args],
        cwd=installed["empty"],
        env=installed["env"],
        timeout=timeout,
    )


@pytest.mark.slow
def test_the_wheel_holds_only_tailhound(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"tailhound", "tailhound-0.1.0.dist-info"}
    for needed in (
        "tailhound/rules/gpu.yaml",
        "tailhound/rules/engine.yaml",
        "tailhound/examples/notifier.yaml",
        "tailhound/examples/agent.yaml",
        "tailhound/catalog/signals.yaml",
        "tailhound/agents/__init__.py",
        "tailhound/streams/app.py",
        "tailhound/notifier/service.py",
        "tailhound-0.1.0.dist-info/licenses/LICENSE",
    ):
        assert needed in names, needed


@pytest.mark.slow
def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    code = (
        "import tailhound, tailhound.agents, tailhound.resources as r; print(tailhound.__file__); "
        "print(tailhound.agents.__file__); print(r.default_rules_dir())"
    )
    out = _run(
        [str(installed["venv"] / "bin" / "python"), "-c", code], cwd=installed["empty"], env=installed["env"]
    ).stdout.splitlines()
    site = str(next((installed["venv"] / "lib").glob("python3*/site-packages")))
    assert all(line.startswith(site) for line in out), out
    assert str(ROOT) not in "\n".join(out)


@pytest.mark.slow
def test_rules_check_docs_and_examples_from_an_empty_directory(installed):
    checked = _tailhound(installed, "rules", "check")
    assert checked.stdout == "" and re.search(r"\d+ rules OK in .*site-packages/tailhound/rules", checked.stderr), (
        checked.stderr
    )
    assert "console" in _tailhound(installed, "example", "notifier").stdout
    assert "nvml:" in _tailhound(installed, "example", "agent").stdout
    assert _tailhound(installed, "catalog").stdout.startswith("# Signal catalog")
    assert _tailhound(installed, "rules", "doc").stdout.startswith("# Root causes")
    _tailhound(installed, "schema", "--out", "generated/schemas")
    assert sorted(p.name for p in (installed["empty"] / "generated" / "schemas").iterdir()) == [
        "deadletter.schema.json",
        "incident-event.schema.json",
        "snapshot-bundle.schema.json",
        "snapshot.schema.json",
    ]
    assert not (installed["empty"] / "docs").exists(), "nothing is written where the user did not say"


@pytest.mark.slow
def test_simulate_record_and_replay_from_an_empty_directory(installed):
    _tailhound(
        installed,
        "simulate",
        "--record",
        "fleet.jsonl",
        "--minutes",
        "35",
        "--fault",
        "thermal-throttle@20m+12m:node=gpu-node-2:gpus=3,5",
    )
    out = _tailhound(installed, "replay", "fleet.jsonl", "--out", "events.jsonl").stdout
    assert re.search(r"replayed \d+ records .* incident events \([1-9]\d* opened\)", out), out
    assert "gpu-thermal-throttle" in (installed["empty"] / "events.jsonl").read_text()


@pytest.mark.slow
@pytest.mark.broker
def test_short_demo_from_an_empty_directory(installed):
    out = _tailhound(
        installed,
        "demo",
        "--minutes",
        "25",
        "--speed",
        "120",
        "--fault",
        "thermal-throttle@8m+10m:node=gpu-node-2:gpus=3,5",
        timeout=240,
    ).stdout
    assert "incidents opened" in out and "gpu-thermal-throttle" in out


@pytest.mark.slow
@pytest.mark.broker
def test_worker_starts_from_an_empty_directory(installed, tmp_path):
    """No config, no broker, no data directory: the worker starts the bundled broker, becomes ready without
    writing in its working directory (its data dir is a temporary one), and stops cleanly on SIGTERM."""
    cwd = tmp_path / "fresh"
    cwd.mkdir()
    log = tmp_path / "worker.log"
    env = dict(installed["env"], TAILHOUND_STREAMS__LOG_LEVEL="info")
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [str(installed["venv"] / "bin" / "tailhound"), "worker"],
            cwd=cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None and "[^Worker]: Ready" not in log.read_text():
            time.sleep(0.5)
        text = log.read_text()
        assert proc.poll() is None, f"the worker exited {proc.returncode}:\n{text[-3000:]}"
        assert "[^Worker]: Ready" in text, text[-3000:]
        assert list(cwd.iterdir()) == [], "nothing is written where the user did not name"
        assert "Traceback" not in text, text[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise AssertionError("the worker did not stop within 30 s of SIGTERM") from None
    assert "Traceback" not in log.read_text()
