"""The import graph: one namespace (tailhound.*), floors that import only downwards, no import circles.

Floors, lowest first (what each may import besides itself):

- core: ``tailhound.*`` outside the packages below (models, catalog, vocabulary, settings, errors,
  recording, Kafka helpers): nothing above it;
- ``tailhound.agents`` (collectors, the snapshot builder, the simulator): core;
- ``tailhound.notifier``: core;
- ``tailhound.streams``: core, and ``tailhound.agents.snapshot_builder``'s family (offline replay and load fitting
  rebuild snapshots from recordings through the agent's own snapshot builder, so replay sees what an agent sends);
- ``tailhound.ingest`` (Prometheus remote write into snapshots): core and ``tailhound.agents`` (the agent's
  snapshot builder builds the snapshots, so the streams side cannot tell them from an agent's);
- the applications, each a package of its own folder (:data:`APP_PACKAGES`: the command line, the worker
  process, the demo, the doctor, rule tests and backtests, capacity planning) and ``__main__``: everything.

A module's floor is the folder it lives in: nothing is listed by hand but the application folders.

Imports inside functions and ``TYPE_CHECKING`` blocks count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
#: the applications floor, by folder: one package per process or command group
APP_PACKAGES = (
    "tailhound.cli",
    "tailhound.worker",
    "tailhound.demo",
    "tailhound.doctor",
    "tailhound.rulestest",
    "tailhound.capacity",
)
ALLOWED = {
    "core": {"core"},
    "agents": {"core", "agents"},
    "notifier": {"core", "notifier"},
    "streams": {"core", "agents", "streams"},
    # the remote-write ingest rebuilds snapshots from Prometheus' samples through the agent's own pipeline
    "ingest": {"core", "agents", "ingest"},
    "apps": {"core", "agents", "notifier", "streams", "ingest", "apps"},
}
BARE = re.compile(r"^\s*(?:from|import)\s+(agents|streams|notifier|ingest)(?:\.|\s|$)", re.M)


def modules() -> dict[str, Path]:
    """Every module of the wheel by dotted name, from pyproject's package-dir mapping."""
    out = {}
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            name = ".".join((package, *rel))
            # tailhound/ itself must not contain the mapped folders (they live at the top level)
            out.setdefault(name, path)
    return out


MODULES = modules()


def floor(module: str) -> str:
    if module == "tailhound.__main__" or any(module == p or module.startswith(f"{p}.") for p in APP_PACKAGES):
        return "apps"  # rule tests, backtests, capacity planning: replay through streams, inputs built as agents do
    for pkg in ("agents", "streams", "notifier", "ingest"):
        if module == f"tailhound.{pkg}" or module.startswith(f"tailhound.{pkg}."):
            return pkg
    return "core"


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if n.startswith("tailhound"):
                r = _resolve(n)
                if r and r != module:
                    found.add(r)
    return found


GRAPH = {m: imports(m, p) for m, p in MODULES.items()}


def test_the_namespace_is_tailhound_only():
    assert set(PACKAGE_DIRS) >= {
        "tailhound",
        "tailhound.agents",
        "tailhound.streams",
        "tailhound.notifier",
        "tailhound.ingest",
    }
    assert all(p == "tailhound" or p.startswith("tailhound.") for p in PACKAGE_DIRS)
    for pkg in ("agents", "streams", "notifier", "ingest"):
        assert not (ROOT / "tailhound" / pkg).exists(), f"tailhound/{pkg} would shadow the mapped {pkg}/ folder"


def test_no_bare_top_level_imports_anywhere():
    """agents/streams/notifier are importable only as tailhound.agents/... (tests and bench included)."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in {".venv", "build", "dist", ".git"} or "site-packages" in rel.parts:
            continue
        for m in BARE.finditer(path.read_text(encoding="utf-8")):
            line = path.read_text(encoding="utf-8")[: m.start()].count("\n") + 1
            offenders.append(f"{rel}:{line}: {m.group(0).strip()}")
    assert offenders == [], "bare imports (use tailhound.<package>):\n" + "\n".join(offenders)


def test_a_bare_import_of_a_mapped_folder_fails_loudly():
    import subprocess
    import sys

    for pkg in ("agents", "streams", "notifier", "ingest"):
        r = subprocess.run([sys.executable, "-c", f"import {pkg}"], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode != 0 and f"import tailhound.{pkg}, not {pkg}" in r.stderr


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_only_its_floor_and_below(module):
    mine = floor(module)
    wrong = sorted(t for t in GRAPH[module] if floor(t) not in ALLOWED[mine])
    assert wrong == [], f"{module} ({mine}) imports from a floor above it: {wrong}"


def test_streams_uses_only_the_snapshot_builder_of_the_agents():
    used = {t for m, targets in GRAPH.items() if floor(m) == "streams" for t in targets if floor(t) == "agents"}
    closure = set()
    todo = list(used)
    while todo:
        m = todo.pop()
        if m not in closure:
            closure.add(m)
            todo.extend(GRAPH[m])
    assert not any(m.startswith(("tailhound.agents.collectors", "tailhound.agents.simulator")) for m in closure)
    assert used <= {"tailhound.agents.snapshot_builder"}


def test_no_import_circles():
    """Tarjan's strongly connected components: every component is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_core_folder_holds_no_application():
    """tailhound/ itself is the core: every module at its root is imported by some floor below the applications
    or is a shared helper; a module there that imports an application floor is an application in the wrong
    folder."""
    root_modules = [m for m, p in MODULES.items() if p.parent == ROOT / "tailhound" and m != "tailhound.__main__"]
    misplaced = sorted(m for m in root_modules if any(floor(t) == "apps" for t in GRAPH[m]))
    assert misplaced == [], f"applications at the core's root (give them a folder): {misplaced}"


@pytest.mark.parametrize("folder", ["agents", "streams", "notifier", "ingest"])
def test_each_layer_is_a_top_level_folder(folder):
    assert (ROOT / folder / "__init__.py").is_file()
    assert PACKAGE_DIRS[f"tailhound.{folder}"] == folder
