"""The streams worker as a child process (``python -m tailhound worker``), as the demo and tests run it.

It gets its settings through ``TAILHOUND_*`` env, its own session (so a terminal's Ctrl-C reaches the
parent, which stops children in order) and ``PR_SET_PDEATHSIG`` (so it never outlives the parent).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tailhound.broker import _die_with_parent
from tailhound.settings import Settings


class WorkerProcess:
    """`tailhound worker` as a child process with its own settings; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
        env.update({
            "TAILHOUND_BROKER": s.broker or "",
            "TAILHOUND_TOPIC_PREFIX": s.topic_prefix,
            "TAILHOUND_PARTITIONS": str(s.partitions),
            "TAILHOUND_RULES_DIR": str(Path(s.rules_dir).resolve()),
            "TAILHOUND_SINKS__CONSOLE__ENABLED": str(s.sinks.console.enabled).lower(),
            "TAILHOUND_SINKS__INCIDENT_TOPIC__ENABLED": str(s.sinks.incident_topic.enabled).lower(),
        })
        for section, values in (("STREAMS", s.streams.model_dump()), ("NOTIFIER", s.notifier.model_dump())):
            for name, value in values.items():
                if value is None:
                    continue
                text = json.dumps(value, default=str) if isinstance(value, list | dict) else str(value)
                env[f"TAILHOUND_{section}__{name.upper()}"] = text
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tailhound", "worker"], env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
