"""deploy/remediation/receiver.py: the example remediation endpoint against a fake Kubernetes API on loopback.

Deliveries come from the real :class:`tailhound.notifier.receivers.webhook.WebhookReceiver`, so these tests also
check that the copied signature check agrees with :mod:`tailhound.notifier.signing`.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailhound.errors import DeliveryError
from tailhound.notifier.receivers.webhook import WebhookConfig, WebhookReceiver, build_payload, encode_body
from tailhound.notifier.signing import sign
from tests.notifier.factories import incident_event, notification

from .helpers import ROOT

RECEIVER_PY = ROOT / "deploy" / "remediation" / "receiver.py"
SECRET = "remediation-test-secret-0123456789"
TOKEN = "sa-token-abc"

_spec = importlib.util.spec_from_file_location("remediation_receiver", RECEIVER_PY)
remediation = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = remediation  # dataclasses look their module up there
_spec.loader.exec_module(remediation)


# --- a fake Kubernetes API: Deployments' scale subresource ----------------------------------------------------------
@dataclass
class FakeKube:
    replicas: dict[str, int] = field(default_factory=lambda: {"vllm": 2})
    version: int = 100
    calls: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    fail_next: list[int] = field(default_factory=list)
    auth_seen: list[str | None] = field(default_factory=list)
    url: str = ""

    @property
    def patches(self) -> list[dict[str, Any]]:
        return [body for method, _, body in self.calls if method == "PATCH"]


@contextmanager
def serve_kube(kube: FakeKube) -> Iterator[FakeKube]:
    path_re = re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments/(?P<name>[^/]+)/scale$")

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _scale(self, ns: str, name: str) -> dict[str, Any]:
            return {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {"name": name, "namespace": ns, "resourceVersion": str(kube.version)},
                "spec": {"replicas": kube.replicas[name]},
                "status": {"replicas": kube.replicas[name]},
            }

        def _route(self, body: dict[str, Any] | None) -> None:
            kube.calls.append((self.command, self.path, body))
            kube.auth_seen.append(self.headers.get("Authorization"))
            if kube.fail_next:
                self._send(kube.fail_next.pop(0), {"kind": "Status", "message": "injected"})
                return
            m = path_re.match(self.path)
            if not m or m["ns"] != "inference" or m["name"] not in kube.replicas:
                self._send(404, {"kind": "Status", "reason": "NotFound"})
                return
            if body is not None:
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    self._send(415, {"kind": "Status"})
                    return
                rv = body.get("metadata", {}).get("resourceVersion")
                if rv is not None and rv != str(kube.version):
                    self._send(409, {"kind": "Status", "reason": "Conflict"})
                    return
                kube.replicas[m["name"]] = body["spec"]["replicas"]
                kube.version += 1
            self._send(200, self._scale(m["ns"], m["name"]))

        def do_GET(self) -> None:
            self._route(None)

        def do_PATCH(self) -> None:
            self._route(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    kube.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield kube
    finally:
        server.shutdown()
        server.server_close()


def env_for(kube: FakeKube, token_file: Path, **over: str) -> dict[str, str]:
    env = {
        "TAILHOUND_WEBHOOK_SECRET": SECRET,
        "K8S_API": kube.url,
        "K8S_NAMESPACE": "inference",
        "K8S_DEPLOYMENT": "vllm",
        "K8S_TOKEN_FILE": str(token_file),
        "SCALE_STEP": "1",
        "MAX_REPLICAS": "10",
        "LISTEN_HOST": "127.0.0.1",
        "LISTEN_PORT": "0",
        "REPLAY_CACHE_FILE": str(token_file.parent / "replay.json"),
    }
    env.update(over)
    return env


@contextmanager
def serve_remediation(env: dict[str, str]) -> Iterator[str]:
    """The example receiver in-process on a free loopback port; yields its URL."""
    server = remediation.make_server(remediation.Config.from_env(env))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/tailhound"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def receiver_process(env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """The receiver as its own process (`python -I -S`, as deployed); yields (the host it says it listens on, port)."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(RECEIVER_PY), "--port", "0"],
        env={**env, "PATH": os.environ.get("PATH", "")},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        m = re.search(r"listening on http://([0-9.]+):(\d+)", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        yield m.group(1), int(m.group(2))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()


@pytest.fixture
def kube():
    with serve_kube(FakeKube()) as k:
        yield k


@pytest.fixture
def token_file(tmp_path) -> Path:
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    return p


def webhook(url: str) -> WebhookReceiver:
    cfg = WebhookConfig(type="webhook", name="remediate", url=url, secret={"env": "S"}, timeout_s=5)
    return WebhookReceiver(cfg, ["127.0.0.1"], environ={"S": SECRET})


def capacity(kind: str = "opened", sequence: int = 1, **over: Any):
    inc = incident_event(root_cause="capacity", event=kind, sequence=sequence, **over)
    return notification(kind, sequence=sequence, incidents=[inc])


def post_raw(
    url: str,
    body: bytes,
    *,
    ts: int | None = None,
    secret: str = SECRET,
    key: str | None = None,
    signed_body: bytes | None = None,
) -> httpx.Response:
    ts = int(time.time()) if ts is None else ts
    headers = {
        "X-Tailhound-Timestamp": str(ts),
        "X-Tailhound-Signature": sign(secret, ts, signed_body or body),
        "Content-Type": "application/json",
    }
    if key:
        headers["Idempotency-Key"] = key
    return httpx.post(url, content=body, headers=headers, timeout=5)


# --- tests ----------------------------------------------------------------------------------------------------------
def test_standard_library_only():
    tree = ast.parse(RECEIVER_PY.read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


async def test_scales_once_for_a_redelivered_key(kube, token_file):
    with serve_remediation(env_for(kube, token_file)) as url:
        r = webhook(url)
        try:
            n = capacity()
            assert await r.send(n, None) == {}
            assert await r.send(n, None) == {}  # redelivery: the receiver answers 409, counted as delivered
        finally:
            await r.close()
        assert kube.replicas["vllm"] == 3
        assert [m for m, _, _ in kube.calls] == ["GET", "PATCH"]
        assert kube.patches == [{"spec": {"replicas": 3}, "metadata": {"resourceVersion": "100"}}]
        assert set(kube.auth_seen) == {f"Bearer {TOKEN}"}
        body = encode_body(build_payload(n))
        again = post_raw(url, body, key=n.idempotency_key)
        assert again.status_code == 409 and again.json() == {"duplicate": n.idempotency_key}


def test_answer_says_what_it_did_and_respects_max_replicas(kube, token_file):
    kube.replicas["vllm"] = 4
    with serve_remediation(env_for(kube, token_file, SCALE_STEP="2", MAX_REPLICAS="5")) as url:
        first = capacity("opened", 1)
        resp = post_raw(url, encode_body(build_payload(first)), key=first.idempotency_key)
        assert resp.status_code == 200
        assert resp.json() == {
            "idempotency_key": first.idempotency_key,
            "action": "scale-out",
            "namespace": "inference",
            "deployment": "vllm",
            "from": 4,
            "to": 5,
            "capped": True,
            "scaled": True,
        }
        update = capacity("updated", 2)
        resp = post_raw(url, encode_body(build_payload(update)), key=update.idempotency_key)
        assert resp.status_code == 200 and resp.json()["scaled"] is False and resp.json()["to"] == 5
    assert kube.replicas["vllm"] == 5
    assert len(kube.patches) == 1


def test_tampered_stale_or_unsigned_requests_get_401(kube, token_file):
    with serve_remediation(env_for(kube, token_file)) as url:
        n = capacity()
        body = encode_body(build_payload(n))
        tampered = body.replace(b'"sequence":1', b'"sequence":7')
        assert tampered != body
        assert post_raw(url, tampered, signed_body=body, key=n.idempotency_key).status_code == 401
        assert post_raw(url, body, secret="wrong-secret", key=n.idempotency_key).status_code == 401
        assert post_raw(url, body, ts=int(time.time()) - 400, key=n.idempotency_key).status_code == 401
        unsigned = httpx.post(url, content=body, timeout=5)
        assert unsigned.status_code == 401
        # none of them used up the key: the genuine request still acts
        assert post_raw(url, body, key=n.idempotency_key).status_code == 200
    assert kube.replicas["vllm"] == 3


@pytest.mark.parametrize(
    "n",
    [
        capacity("resolved", 3),
        notification(incidents=[incident_event(root_cause="gpu-thermal-throttle")]),
        notification(incidents=[incident_event(root_cause="kv-cache-pressure")]),
    ],
    ids=["capacity-resolved", "thermal", "kv-cache"],
)
def test_other_kinds_and_actions_are_ignored(kube, token_file, n):
    with serve_remediation(env_for(kube, token_file)) as url:
        resp = post_raw(url, encode_body(build_payload(n)), key=n.idempotency_key)
    assert resp.status_code == 202 and "ignored" in resp.json()
    assert kube.calls == []


def test_model_mapping_and_key_mismatch(kube, token_file):
    kube.replicas["vllm-llama"] = 1
    env = env_for(kube, token_file, K8S_DEPLOYMENT="", K8S_DEPLOYMENT_MAP="llama-3-70b=vllm-llama, mixtral = x")
    with serve_remediation(env) as url:
        n = capacity()
        body = encode_body(build_payload(n))
        assert post_raw(url, body, key="someone/else/1").status_code == 400  # the header must match the body
        assert post_raw(url, body, key=n.idempotency_key).status_code == 200
        lead = capacity().lead
        other = notification(
            incidents=[
                lead.model_copy(
                    update={
                        "incident_id": "inc-0000000000000009",
                        "scope": lead.scope.model_copy(update={"model": "mistral-7b"}),
                    }
                )
            ]
        )
        resp = post_raw(url, encode_body(build_payload(other)), key=other.idempotency_key)
        assert resp.status_code == 202 and "mistral-7b" in resp.json()["ignored"]
    assert kube.replicas == {"vllm": 2, "vllm-llama": 2}


async def test_kubernetes_failure_is_retryable_and_not_remembered(kube, token_file):
    kube.fail_next = [500]
    with serve_remediation(env_for(kube, token_file)) as url:
        r = webhook(url)
        n = capacity()
        try:
            with pytest.raises(DeliveryError) as info:
                await r.send(n, None)
            assert info.value.retryable is True and info.value.status == 503 and info.value.retry_after == 5
            assert await r.send(n, None) == {}
        finally:
            await r.close()
    assert kube.replicas["vllm"] == 3


def test_runs_standalone_as_a_subprocess(kube, token_file):
    """`python -I -S` (no site-packages, so no tailhound) with env settings; it logs where it listens."""
    with receiver_process(env_for(kube, token_file)) as (host, port):
        base = f"http://{host}:{port}"
        assert httpx.get(f"{base}/healthz", timeout=5).json() == {"ok": True}
        n = capacity()
        resp = post_raw(f"{base}/", encode_body(build_payload(n)), key=n.idempotency_key)
        assert resp.status_code == 200 and resp.json()["to"] == 3
        assert post_raw(f"{base}/", encode_body(build_payload(n)), key=n.idempotency_key).status_code == 409
    assert kube.replicas["vllm"] == 3


# --- hardening: bind address, request bodies, replays after a restart ---------------------------------------------
def exchange(port: int, data: bytes, drip: bytes = b"") -> tuple[float, int | None]:
    """Send `data` (then `drip`, a byte per 0.1 s) on a connection left open -> (seconds to the answer, status)."""
    with socket.create_connection(("127.0.0.1", port), timeout=6) as sock:
        start, answer = time.monotonic(), b""
        sock.sendall(data)
        for byte in drip:
            if select.select([sock], [], [], 0.1)[0]:
                break
            with contextlib.suppress(OSError):
                sock.sendall(bytes([byte]))
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
        return time.monotonic() - start, int(m.group(1)) if m else None


HEAD = b"POST /hooks/tailhound HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    ("headers", "body", "drip", "status"),
    [
        (b"Content-Length: -1\r\n", b"{}", b"", 400),
        (b"Content-Length: 100\r\n", b'{"short": true}', b"", 408),  # then nothing more
        (b"Content-Length: 40\r\n", b"{", b'"drip": "one byte every 0.1 s"}' * 2, 408),  # never a read timeout
        (b"", b"{}", b"", 411),
        (b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n", b"", 411),
        (b"Content-Length: 99999999999\r\n", b"{}", b"", 413),
        (b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}", b"", 400),
        (b"Content-Length: 0x10\r\n", b"{}", b"", 400),
    ],
    ids=["negative", "short", "drip", "absent", "chunked", "oversized", "two-lengths", "not-decimal"],
)
def test_bad_or_slow_bodies_are_answered_within_the_read_timeout(kube, token_file, headers, body, drip, status):
    """Content-Length -1 made rfile.read(-1) wait for EOF and a short body held the thread forever, before any
    signature check. Now: 400/411/413 at once, 408 once READ_TIMEOUT_S has passed since the body was due."""
    with serve_remediation(env_for(kube, token_file, READ_TIMEOUT_S="0.5")) as url:
        port = int(url.split(":")[2].split("/")[0])
        took, got = exchange(port, HEAD + headers + b"\r\n" + body, drip)
        assert got == status and took < (3.0 if status == 408 else 1.0), (got, took)  # the old code: > 6 s
        n = capacity()  # the server is not stuck
        assert post_raw(url, encode_body(build_payload(n)), key=n.idempotency_key).status_code == 200
    assert kube.replicas["vllm"] == 3


def test_default_bind_is_loopback(kube, token_file):
    env = {k: v for k, v in env_for(kube, token_file).items() if k != "LISTEN_HOST"}
    assert remediation.Config.from_env(env).host == "127.0.0.1"
    with receiver_process(env) as (host, port):
        assert host == "127.0.0.1"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json() == {"ok": True}
        with pytest.raises(OSError):  # bound to 0.0.0.0 it would answer on every 127/8 address (and the LAN)
            socket.create_connection(("127.0.0.2", port), timeout=2).close()


def test_a_replay_after_a_restart_is_refused(kube, token_file):
    """The same signed bytes again, inside the window, to a restarted receiver: 409, one scale-out."""
    env = env_for(kube, token_file)
    n = capacity()
    body, ts = encode_body(build_payload(n)), int(time.time())
    with receiver_process(env) as (_, port):
        assert post_raw(f"http://127.0.0.1:{port}/", body, ts=ts, key=n.idempotency_key).status_code == 200
    with receiver_process(env) as (_, port):
        again = post_raw(f"http://127.0.0.1:{port}/", body, ts=ts, key=n.idempotency_key)
        assert again.status_code == 409 and again.json() == {"duplicate": n.idempotency_key}
    assert kube.replicas["vllm"] == 3 and len(kube.patches) == 1
    cache = Path(env["REPLAY_CACHE_FILE"])
    assert json.loads(cache.read_text()) == {"keys": {n.idempotency_key: ts + 300}}
    assert cache.stat().st_mode & 0o077 == 0


def test_replay_cache_file_is_pruned_by_the_window_and_bounded(tmp_path):
    path, now = tmp_path / "replay.json", [1000.0]
    bounded = remediation.ReplayCache(tmp_path / "bounded.json", window_s=300, max_keys=3, clock=lambda: now[0])
    for i, ts in enumerate((600, 1000, 1000)):
        assert bounded.full_for() is None
        bounded.add(f"k{i}", ts)
    assert bounded.full_for() is None  # k0 (signed at 600) is past its window: forgotten to make room
    bounded.add("k3", 1000)
    assert list(bounded.keys) == ["k1", "k2", "k3"]
    assert bounded.full_for() == 300  # every key could still be replayed: none is forgotten
    assert list(json.loads((tmp_path / "bounded.json").read_text())["keys"]) == ["k1", "k2", "k3"]
    cache = remediation.ReplayCache(path, window_s=300, max_keys=10, clock=lambda: now[0])
    cache.add("old", 900)
    cache.add("new", 1000)
    now[0] = 1250.0  # `old` (signed at 900) can no longer pass the signature check: out of the file
    cache.add("newer", 1250)
    assert json.loads(path.read_text())["keys"] == {"new": 1300, "newer": 1550}
    assert "old" in cache.keys  # still answered 409 while this process runs
    assert list(remediation.ReplayCache(path, window_s=300, max_keys=10, clock=lambda: 1400.0).keys) == ["newer"]


@pytest.mark.parametrize(
    ("name", "error"),
    [("bad.json", "unreadable replay cache"), ("no/such/dir/r.json", "cannot write the replay cache")],
)
def test_an_unreadable_or_unwritable_replay_cache_stops_the_receiver(kube, token_file, tmp_path, name, error):
    (tmp_path / "bad.json").write_text("[not json")
    cfg = remediation.Config.from_env(env_for(kube, token_file, REPLAY_CACHE_FILE=str(tmp_path / name)))
    with pytest.raises(SystemExit, match=error):
        remediation.make_server(cfg)
