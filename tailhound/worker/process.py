"""The streams worker as a child process (``python -m tailhound worker``), as the demo and tests run it.

It gets its settings through ``TAILHOUND_*`` env, its own session (so a terminal's Ctrl-C reaches the
parent, which stops children in order) and ``PR_SET_PDEATHSIG`` (so it never outlives the parent).

Stopping is bounded: SIGTERM, then SIGKILL after a grace period (the worker itself exits within
:data:`tailhound.worker.guard.SHUTDOWN_GRACE_S` of the signal). :meth:`WorkerProcess.supervise` is a
minimal supervisor, like ``Restart=on-failure`` of systemd: a worker that exited non-zero (it gives up when
commits keep failing, see :mod:`tailhound.worker.guard`) is started again after a back-off.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tailhound.broker import _die_with_parent
from tailhound.errors import TailhoundError
from tailhound.settings import Settings


class WorkerProcess:
    """`tailhound worker` as a child process with its own settings; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, settings: Settings, log_path: Path, *, max_restarts: int = 5) -> None:
        self.settings = settings
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.max_restarts = max_restarts
        #: exit statuses of the workers that failed (as supervise saw them)
        self.exits: list[int] = []
        self.restarts = 0
        self._failed_at: float | None = None

    def start(self) -> None:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
        env.update(
            {
                "TAILHOUND_BROKER": s.broker or "",
                "TAILHOUND_TOPIC_PREFIX": s.topic_prefix,
                "TAILHOUND_PARTITIONS": str(s.partitions),
                "TAILHOUND_REPLICATION_FACTOR": str(s.replication_factor),
                "TAILHOUND_RULES_DIR": str(Path(s.rules_dir).resolve()),
                "TAILHOUND_SINKS__CONSOLE__ENABLED": str(s.sinks.console.enabled).lower(),
                "TAILHOUND_SINKS__INCIDENT_TOPIC__ENABLED": str(s.sinks.incident_topic.enabled).lower(),
            }
        )
        for section, values in (
            ("STREAMS", s.streams.model_dump()),
            ("NOTIFIER", s.notifier.model_dump()),
            ("INGEST", s.ingest.model_dump()),
        ):
            for name, value in values.items():
                if value is None:
                    continue
                text = json.dumps(value, default=str) if isinstance(value, list | dict) else str(value)
                env[f"TAILHOUND_{section}__{name.upper()}"] = text
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # a restarted worker appends to the same log
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tailhound", "worker"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def supervise(self, backoff_s: float = 1.0) -> bool:
        """Call regularly: starts the worker again `backoff_s` (doubling per restart, at most 10 s) after it
        exited non-zero. True while the worker runs or is about to be started again; False when it exited
        with status 0 or was never started. Raises TailhoundError once it failed `max_restarts` + 1 times."""
        proc = self.proc
        if proc is None or proc.poll() == 0:
            return False
        if proc.returncode is None:
            return True
        now = time.monotonic()
        if self._failed_at is None:
            self._failed_at = now
            self.exits.append(proc.returncode)
        if self.restarts >= self.max_restarts:
            raise TailhoundError(
                f"the streams worker failed {len(self.exits)} times (last status "
                f"{proc.returncode}); last lines of {self.log_path}:\n{self.log_tail()}"
            )
        if now - self._failed_at >= min(backoff_s * 2**self.restarts, 10.0):
            self.restarts += 1
            self._failed_at = None
            self.start()
        return True

    def terminate(self) -> None:
        """Ask the worker to stop (SIGTERM) without waiting; :meth:`stop` waits (and kills)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL if the worker has not exited `timeout` seconds later."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
