"""Real exporters on loopback for the tests: Debian's prometheus-node-exporter, prometheus-blackbox-exporter
and nginx (stub_status), each on a free 127.0.0.1 port with its *default* configuration (only the listen
address is ours), started in their own process session and always stopped."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import require_tool

NODE_EXPORTER_INSTALL = "apt-get install prometheus-node-exporter"
BLACKBOX_INSTALL = "apt-get install prometheus-blackbox-exporter"
NGINX_INSTALL = "apt-get install nginx"
#: Debian's packaged blackbox module file (http_2xx, tcp_connect, icmp, ...): the default the package runs
BLACKBOX_DEFAULT_CONFIG = Path("/etc/prometheus/blackbox.yml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Exporter:
    """One running exporter: its base URL, process and log."""

    name: str
    port: int
    proc: subprocess.Popen
    log: Path
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def _wait_http(exporter: Exporter, path: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # bounded by timeout_s
        if exporter.proc.poll() is not None:
            break
        with contextlib.suppress(OSError), urllib.request.urlopen(exporter.url + path, timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.1)
    exporter.stop()
    raise RuntimeError(f"{exporter.name} did not answer {path}:\n{exporter.log_tail()}")


def _start(name: str, argv: list[str], workdir: Path, port: int, ready_path: str) -> Exporter:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
    exporter = Exporter(name, port, proc, log)
    _wait_http(exporter, ready_path)
    return exporter


def start_node_exporter(workdir: Path, *flags: str) -> Exporter:
    """node_exporter with its default collectors and flags; `flags` adds to them (e.g. a netstat field list)."""
    binary = require_tool("prometheus-node-exporter", NODE_EXPORTER_INSTALL)
    port = free_port()
    return _start(
        "node-exporter", [binary, f"--web.listen-address=127.0.0.1:{port}", *flags], workdir, port, "/metrics"
    )


def start_blackbox_exporter(workdir: Path, config: Path | None = None) -> Exporter:
    """blackbox_exporter with Debian's default module file (or `config`)."""
    binary = require_tool("prometheus-blackbox-exporter", BLACKBOX_INSTALL)
    config = config or BLACKBOX_DEFAULT_CONFIG
    port = free_port()
    return _start(
        "blackbox-exporter",
        [binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}"],
        workdir,
        port,
        "/metrics",
    )


NGINX_CONF = """\
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {workdir}/tmp;
    proxy_temp_path {workdir}/tmp;
    fastcgi_temp_path {workdir}/tmp;
    uwsgi_temp_path {workdir}/tmp;
    scgi_temp_path {workdir}/tmp;
    server {{
        listen 127.0.0.1:{port};
        location = /nginx_status {{ stub_status; }}
        location / {{ return 200 "ok\\n"; }}
    }}
}}
"""


def _sbin_tool(name: str, install: str) -> str:
    """`name` from PATH or from /usr/sbin and /sbin, where Debian puts daemons and a user's PATH does not look."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=path) or require_tool(name, install)


def start_nginx(workdir: Path) -> Exporter:
    """nginx serving `stub_status` at /nginx_status (the documented location) and 200 elsewhere."""
    binary = _sbin_tool("nginx", NGINX_INSTALL)
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tmp").mkdir(exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(workdir=workdir, port=port))
    return _start(
        "nginx",
        [binary, "-e", str(workdir / "error.log"), "-p", str(workdir), "-c", str(conf)],
        workdir,
        port,
        "/nginx_status",
    )


@contextlib.contextmanager
def running(exporter: Exporter) -> Iterator[Exporter]:
    try:
        yield exporter
    finally:
        exporter.stop()
