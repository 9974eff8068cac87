"""scikit-learn, scipy and numpy are the `fit` extra: the agent and the worker (with a fitted load model) run
without them, the images do not install them, and `tailhound baseline fit` says how to get them.

Each check runs in a child interpreter where a `sys.meta_path` finder refuses the three packages, as a base
install (`pip install tailhound`) lacks them."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.recording import write_records
from tailhound.streams.loadfit import training_rows
from tailhound.streams.loadmodel import FIT_INSTALL_HINT, LoadModel
from tests.streams.test_loadfit import RULE

from .helpers import ROOT

BLOCKED = ("sklearn", "scipy", "numpy")
#: run first in every child: what a base install cannot import
BLOCKER = f"""
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""
#: printed last by every child: which of the blocked packages it holds (must be none)
LOADED = f"\nprint('LOADED', sorted(m for m in sys.modules if m.partition('.')[0] in {BLOCKED!r}))\n"


def child(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code + LOADED],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def loaded(proc: subprocess.CompletedProcess[str]) -> list[str]:
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED ")]
    return json.loads(line.removeprefix("LOADED ").replace("'", '"'))


def exit_code(proc: subprocess.CompletedProcess[str]) -> int:
    """The CLI's exit status in a child that ran :func:`cli` (0 when it returned without SystemExit)."""
    codes = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("EXIT ")]
    return int(codes[0]) if codes and codes[0] != "None" else 0


def cli(*args: str) -> str:
    return (
        f"import sys\nsys.argv = ['tailhound', *{list(args)!r}]\nfrom tailhound.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    print('EXIT', exc.code)\n"
    )


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict[str, Path]:
    """A load model fitted here (where the dev extra has scikit-learn), a normal and a faulty recording."""
    base = tmp_path_factory.mktemp("fit")
    normal, faulty = base / "normal.jsonl", base / "faulty.jsonl"
    with normal.open("w", encoding="utf-8") as fh:
        write_records(fh, iter_records(FleetSimulator(SimConfig(nodes=1, seed=21)), 60))
    sim = FleetSimulator(SimConfig(nodes=1, seed=4), [FaultSpec.parse("kv-cache-pressure@20m+10m")])
    with faulty.open("w", encoding="utf-8") as fh:
        write_records(fh, iter_records(sim, 35))
    from tailhound.recording import read_records

    rows, targets = training_rows(read_records(normal))
    model = base / "ttft.json"
    LoadModel.fit(rows, targets, signal="latency.ttft.p95").save(model)
    rules = base / "rules"
    rules.mkdir()
    (rules / "load.yaml").write_text(RULE, encoding="utf-8")
    return {"dir": base, "normal": normal, "faulty": faulty, "model": model, "rules": rules}


def test_the_blocker_blocks(tmp_path):
    proc = child("import numpy", tmp_path)
    assert proc.returncode != 0 and "No module named 'numpy'" in proc.stderr


def test_the_worker_evaluates_a_fitted_load_model_without_scikit_learn(fitted):
    """The worker's evaluation path (the Faust agent's step, as replay runs it) with the load model loaded."""
    code = f"""
import tailhound.worker.compose, tailhound.streams.app  # the worker process's modules
from tailhound.recording import read_records
from tailhound.streams.processor import read_load_models
from tailhound.streams.replay import replay_records
from tailhound.streams.ruleset.rulefile import load_rules
models = read_load_models([{str(fitted["model"])!r}])
rules = load_rules({str(fitted["rules"])!r})
result = replay_records(read_records({str(fitted["faulty"])!r}), rules, load_models=models)
from tailhound.streams.loadmodel import WindowFeatures, expected_for
model = models['latency.ttft.p95']
middle = WindowFeatures(**{{k: (lo + hi) / 2 for k, (lo, hi) in model.artifact.feature_ranges.items()}})
cost = expected_for('latency.ttft.p95', middle, model, None)
print('OPENED', sum(e.event == 'opened' for e in result.events), 'EXPECTED', cost.source, cost.value > 0)
"""
    proc = child(code, fitted["dir"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert loaded(proc) == []
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("OPENED")]
    _, opened, _, source, positive = line.split()
    assert int(opened) >= 1 and source == "load-model" and positive == "True", line


def test_the_agent_collects_without_scikit_learn(tmp_path):
    """`tailhound record` runs the agent's runtime and collectors (procnet reads this machine's /proc)."""
    (tmp_path / "agent.yaml").write_text("node: n1\nlisten: null\nprocnet:\n  interval_s: 0.5\n", encoding="utf-8")
    proc = child(
        "import tailhound.agents.main\n"
        + cli("record", "--config", "agent.yaml", "--out", "rec.jsonl", "--duration", "1.5"),
        tmp_path,
    )
    assert proc.returncode == 0 and exit_code(proc) == 0, proc.stdout + proc.stderr[-3000:]
    assert loaded(proc) == []
    lines = (tmp_path / "rec.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all(json.loads(ln)["job"] for ln in lines)


def test_baseline_fit_without_the_extra_says_how_to_install_it(fitted, tmp_path):
    proc = child(cli("baseline", "fit", str(fitted["normal"]), "--out", "m.json"), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert exit_code(proc) == 2, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())
    assert FIT_INSTALL_HINT in said and "scikit-learn" in said and "Traceback" not in proc.stderr
    assert not (tmp_path / "m.json").exists()


def test_baseline_fit_with_the_extra_writes_the_model(fitted, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", cli("baseline", "fit", str(fitted["normal"]), "--out", "m.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0 and exit_code(proc) == 0, proc.stdout + proc.stderr[-3000:]
    assert LoadModel.load(tmp_path / "m.json").signal == "latency.ttft.p95"


def test_capacity_knees_without_numpy_say_how_to_install_it(tmp_path):
    """numpy left the base install: `tailhound capacity` (the loadtest extra) names the extra instead of a
    traceback."""
    code = """
from tailhound.capacity.knees import find_knee
from tailhound.errors import TailhoundError
try:
    find_knee([1, 2, 4, 8, 16, 32], [0.1, 0.1, 0.11, 0.12, 0.4, 1.5])
except TailhoundError as exc:
    print('HINT', exc)
"""
    proc = child(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HINT finding knees needs numpy: pip install 'tailhound[loadtest]'" in proc.stdout
    assert loaded(proc) == []


def test_error_messages_keep_their_brackets(tmp_path):
    """The CLI (main) prints a TailhoundError as text: an install hint's "[fit]" is not taken for markup."""
    code = cli("baseline", "fit", "missing.jsonl", "--out", "m.json").replace(
        "from tailhound.cli import main",
        "from tailhound.cli import main\n"
        "import tailhound.streams.loadfit as lf\nfrom tailhound.errors import TailhoundError\n"
        "def fails(*args, **kwargs):\n    raise TailhoundError('x [fit] y [0]')\n"
        "lf.training_rows = fails",
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert exit_code(proc) == 2 and "x [fit] y [0]" in proc.stderr, proc.stdout + proc.stderr


def test_the_fit_extra_holds_scikit_learn_and_the_base_install_does_not():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {
        extra: {r.split(">")[0].split("<")[0].split("[")[0].strip() for r in reqs}
        for extra, reqs in project["optional-dependencies"].items()
    }
    base = {r.split(">")[0].split("<")[0].split("[")[0].strip() for r in project["dependencies"]}
    assert not {"scikit-learn", "scipy", "numpy"} & base
    assert {"scikit-learn", "numpy"} <= names["fit"] <= names["dev"]


def test_the_image_installs_no_extra():
    """The Dockerfile installs the package as is: agents and workers get neither scikit-learn nor test tools."""
    installs = [ln for ln in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines() if "pip install" in ln]
    assert installs and all("[" not in ln for ln in installs), installs
