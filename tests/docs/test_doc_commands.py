"""Every documented command runs as written: the fenced ``sh`` blocks of README.md and docs/*.md, against the
package installed from a freshly built wheel, from an empty directory (one per document, HOME a temporary one).

A command is a line (``\\``-continued lines joined) of a ``sh``/``bash``/``shell`` block whose first word, after
any ``VAR=value`` assignments, is ``tailhound``; the lines of one document run in their order, in one directory,
so a command may use the file an earlier one wrote (``tailhound example agent > agent.yaml``). Each gets the test
session's bundled broker (``TAILHOUND_BROKER``) and a topic prefix of its own; the bundled examples' listen
addresses are moved to free loopback ports through the variables they read (``AGENT_LISTEN``,
``INGEST_LISTEN``), so the documented text stays verbatim.

What cannot run here is in :data:`SKIP` with the reason; commands that run until stopped are in
:data:`INTERRUPT` (stopped with SIGINT after a few seconds: they must still be running, then exit 0); other exit
codes a command documents are in :data:`EXIT`. Each entry must match a documented command (a stale one fails),
and a failure names the document, line and command.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tailhound.broker import free_port
from tests.wheel_install import ROOT, session_install

#: the "wheel" group shares the wheel build with tests/tailhound/test_packaging.py (one xdist worker)
pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.xdist_group("wheel")]

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: the documents whose commands take longest start first (they bound the wall time)
FIRST = ("docs/notifier.md", "docs/recording-format.md", "docs/rules-testing.md")
SHELLS = {"sh", "bash", "shell"}
#: per command: its own limit (a documented command that takes longer is a doc to change)
COMMAND_TIMEOUT_S = 90.0

#: (document, start of the command): why it does not run here
SKIP: dict[tuple[str, str], str] = {
    # a host this machine cannot reach (the test has no network, and no such hosts)
    ("README.md", "tailhound doctor --prometheus http://prometheus:9090"): "a Prometheus at a named host",
    ("docs/prometheus.md", "tailhound doctor --prometheus http://prometheus.monitoring.svc"): "a cluster Prometheus",
    ("docs/prometheus.md", "TAILHOUND_BROKER=kafka://kafka-0:9092 tailhound ingest"): "a Kafka at a named host",
    ("docs/doctor.md", "tailhound doctor --target dcgm=http://10.0.0.5:9400"): "exporters on another host",
    ("docs/capacity.md", "tailhound loadtest --target http://10.0.3.7:8000"): "an inference server on another host",
    # inputs the reader brings (their files, a git checkout, an earlier run's ids)
    ("docs/capacity.md", "tailhound capacity result.json"): "the result.json of the load test above",
    (
        "docs/capacity.md",
        "TAILHOUND_STREAMS__CAPACITY_FILE=/etc/tailhound/capacity.yaml tailhound worker",
    ): "the capacity file of the step above, in /etc",
    ("docs/doctor.md", "tailhound doctor scrape.jsonl --rules ./rules"): "the reader's own rules directory",
    ("docs/rules-testing.md", "tailhound rules test my-tests.yaml"): "the reader's own tests and rules",
    ("docs/simulator.md", "tailhound simulate --record code.jsonl"): "the public request traces next to a checkout",
    ("docs/rules-testing.md", "tailhound rules backtest fleet.jsonl --truth truth.yaml"): "the reader's truth file",
    ("docs/rules-testing.md", "tailhound rules backtest fleet.jsonl --rules rules --against main"): "a git checkout",
    ("docs/rules-testing.md", "tailhound rules backtest fleet.jsonl --against /tmp/old-rules"): "an older rule pack",
    ("docs/notifier.md", "tailhound silence expire sil-"): "the id of a silence made elsewhere",
    (
        "docs/notifier.md",
        "tailhound silence add -m 'root_cause=\"network-path\"'",
    ): "a fixed end date; a silence may end at most 30 days ahead of the day the test runs",
    ("docs/notifier.md", "tailhound incidents show inc-"): "the id of an incident from a running fleet",
    ("docs/notifier.md", "tailhound explain inc-"): "the id of an incident from a running fleet",
    ("docs/notifier.md", "tailhound explain --file events.jsonl"): "a replay's events file",
    ("docs/notifier.md", "tailhound notifier routes test --config notifier.yaml --incident"): "an incidents file",
}

#: (document, start of the command): seconds it runs before SIGINT (it serves or collects until stopped)
INTERRUPT: dict[tuple[str, str], float] = {
    ("README.md", "tailhound ingest -c ingest.yaml"): 4.0,
    ("docs/agent.md", "tailhound agent  --config agent.yaml"): 4.0,
    ("docs/agent.md", "tailhound record --config agent.yaml --out scrape.jsonl --duration 300"): 4.0,
    ("docs/doctor.md", "tailhound record --config agent.yaml --out scrape.jsonl --duration 120"): 4.0,
    ("docs/recording-format.md", "tailhound record --config agent.yaml --out scrape.jsonl --duration 60"): 4.0,
}

#: (document, start of the command): the exit codes it documents, and why
EXIT: dict[tuple[str, str], tuple[set[int], str]] = {
    ("docs/doctor.md", "tailhound doctor scrape.jsonl"): ({0, 1}, "1: a critical rule is blind on this host"),
    ("docs/notifier.md", "tailhound notifier check notifier-production.yaml --secrets"): (
        {1},
        "the production example's secrets are not in this env",
    ),
}


@dataclass(frozen=True)
class Command:
    doc: str  # relative to the checkout
    line: int
    text: str

    def where(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def _is_tailhound(text: str) -> bool:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return False
    words = [w for w in words if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)] if words else []
    return bool(words) and words[0] == "tailhound"


def documented_commands(path: Path) -> list[Command]:
    """The runnable tailhound commands of one Markdown file, in order."""
    doc = path.relative_to(ROOT).as_posix()
    out: list[Command] = []
    fence: str | None = None
    pending: tuple[int, str] | None = None
    for no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip().split() or [""])[0]
            pending = None
            continue
        if fence not in SHELLS:
            continue
        start, text = pending if pending is not None else (no, "")
        text += (" " if text else "") + stripped.removeprefix("$ ")
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        if _is_tailhound(text):
            out.append(Command(doc, start, text))
    return out


def _entry(table: dict, cmd: Command):  # the table's value for `cmd`, or None
    return next((v for (doc, start), v in table.items() if doc == cmd.doc and cmd.text.startswith(start)), None)


def _run_one(cmd: Command, cwd: Path, env: dict[str, str]) -> str | None:
    """Run `cmd` in `cwd`; None when it did what it should, else what went wrong."""
    wait = _entry(INTERRUPT, cmd)
    codes, _why = _entry(EXIT, cmd) or ({0}, "")
    log = cwd.parent / f"{cwd.name}-{cmd.line}.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            ["bash", "-c", cmd.text],
            cwd=cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            if wait is not None:
                try:
                    rc = proc.wait(timeout=wait)
                    return f"exited {rc} within {wait:g} s; it should run until stopped:\n{_tail(log)}"
                except subprocess.TimeoutExpired:
                    pass
                # a loaded machine can take longer than `wait` to start: stop it once it says it runs
                _wait_for_start(proc, log)
                with contextlib.suppress(ProcessLookupError):  # it may end by itself meanwhile (--duration)
                    os.killpg(proc.pid, signal.SIGINT)
            rc = proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"still running after {COMMAND_TIMEOUT_S:g} s:\n{_tail(log)}"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if rc not in codes:
        return f"exited {rc} (expected {sorted(codes)}):\n{_tail(log)}"
    return None


#: how long a run-until-stopped command may take to write its start line (bounded: a loaded CI machine)
START_TIMEOUT_S = 60.0
#: after the start line: the signal handlers are installed once the event loop runs
AFTER_START_S = 1.5


def _wait_for_start(proc: subprocess.Popen, log: Path) -> None:
    """Until the process logged its start line (``tailhound <process> starting``), at most START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if " starting" in log.read_text(errors="replace"):
            time.sleep(AFTER_START_S)
            return
        time.sleep(0.2)


def _tail(log: Path, chars: int = 2500) -> str:
    text = log.read_text(errors="replace")
    return "    " + text[-chars:].replace("\n", "\n    ")


def _run_doc(path: Path, base: Path, venv: Path, env: dict[str, str], broker: str) -> list[str]:
    """Every runnable command of one document, in order, in its own empty directory; the failures."""
    name = path.stem
    cwd, home = base / name, base / f"{name}-home"
    cwd.mkdir()
    home.mkdir()
    env = dict(
        env,
        HOME=str(home),
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="200",
        TAILHOUND_BROKER=broker,
        TAILHOUND_TOPIC_PREFIX=f"docs{uuid.uuid4().hex[:8]}.",
        TAILHOUND_PARTITIONS="2",
        TAILHOUND_NOTIFIER__API_LISTEN="",
        AGENT_LISTEN=f"127.0.0.1:{free_port()}",
        INGEST_LISTEN=f"127.0.0.1:{free_port()}",
    )
    failures = []
    for cmd in documented_commands(path):
        if _entry(SKIP, cmd) is not None:
            continue
        t0 = time.monotonic()
        problem = _run_one(cmd, cwd, env)
        print(f"DOC {time.monotonic() - t0:5.1f} s {cmd.where()}")
        if problem is not None:
            failures.append(f"{cmd.where()}\n  {problem}")
    return failures


@pytest.fixture(scope="module")
def doc_results(tmp_path_factory, broker) -> dict[str, list[str]]:
    """The failures of every document, run three at a time (each document's commands in order)."""
    installed = session_install(tmp_path_factory)
    base = tmp_path_factory.mktemp("docs")
    with ThreadPoolExecutor(max_workers=3) as pool:
        ordered = sorted(DOCS, key=lambda p: (p.relative_to(ROOT).as_posix() not in FIRST, p))
        futures = {
            p.relative_to(ROOT).as_posix(): pool.submit(
                _run_doc, p, base, installed["venv"], installed["env"], broker.url
            )
            for p in ordered
        }
        return {doc: f.result() for doc, f in futures.items()}


@pytest.mark.parametrize("doc", [p.relative_to(ROOT).as_posix() for p in DOCS])
def test_documented_commands_run_verbatim_from_a_wheel(doc, doc_results):
    failures = doc_results[doc]
    assert not failures, f"{len(failures)} documented command(s) of {doc} failed:\n" + "\n".join(failures)


def test_every_exception_names_a_documented_command():
    commands = [c for p in DOCS for c in documented_commands(p)]
    stale = [
        f"{table}: {doc}: {start!r}"
        for table, entries in (("SKIP", SKIP), ("INTERRUPT", INTERRUPT), ("EXIT", EXIT))
        for doc, start in entries
        if not any(c.doc == doc and c.text.startswith(start) for c in commands)
    ]
    assert not stale, "entries that match no documented command (update them with the docs):\n" + "\n".join(stale)


def test_the_extraction_finds_commands_in_every_shell_block_kind():
    found = documented_commands(ROOT / "docs" / "rules-testing.md")
    assert any(
        c.text.startswith("tailhound simulate --minutes 45") and "--fault kv-cache-pressure" in c.text for c in found
    ), "continued lines are joined"
    assert all(_is_tailhound(c.text) for c in found)
    assert not _is_tailhound("make demo") and _is_tailhound("TAILHOUND_BROKER=kafka://x:1 tailhound ingest")
