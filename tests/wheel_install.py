"""tailhound as a user installs it: the wheel built from the checkout, installed into a fresh virtualenv.

Built once per test session (:func:`session_install`) and shared by the tests that need it
(tests/tailhound/test_packaging.py, tests/docs/). The venv reuses this environment's dependencies (a .pth
file pointing at a folder of links to them, tailhound's own editable install left out) and installs the
wheel with ``pip --no-index``, so it is quick and needs no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_checked(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    said = f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{said}"
    return r


def checkout_copy(dest: Path) -> Path:
    """The files git would commit (tracked and not ignored), so the build sees what a fresh clone has."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    return dest


def install_wheel(base: Path) -> dict:
    """Build the wheel under `base`, install it into `base`/venv; the venv, the wheel, an empty dir, the env."""
    src = checkout_copy(base / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAILHOUND_", "PYTHON", "VIRTUAL_ENV"))}
    run_checked(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(base / "dist"), str(src)],
        cwd=base,
        env=env,
    )
    wheel = next((base / "dist").glob("tailhound-*.whl"))
    deps = base / "deps"  # the test environment's packages without tailhound (its editable install must not be seen)
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("tailhound", "__editable__", "_tailhound", "__pycache__")):
            (deps / entry.name).symlink_to(entry)
    venv = base / "venv"
    run_checked([sys.executable, "-m", "venv", str(venv)], cwd=base, env=env)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "test-deps.pth").write_text(f"{deps}\n")
    run_checked(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--quiet", str(wheel)], cwd=base, env=env
    )
    empty = base / "empty"
    empty.mkdir()
    return {"wheel": wheel, "venv": venv, "empty": empty, "env": env}


_SESSION: list[dict] = []


def session_install(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """This session's wheel install (see :func:`install_wheel`): built by the first test module that asks."""
    if not _SESSION:
        _SESSION.append(install_wheel(tmp_path_factory.mktemp("wheel")))
    return _SESSION[0]
