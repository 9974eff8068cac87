#!/usr/bin/env python3
"""EXAMPLE remediation endpoint for tailhound webhooks: scales out a Deployment on a `capacity` incident.

An example to copy and adapt, NOT a production receiver: no TLS, a replay cache in a local file (one
process), bounds on request bodies but not on a client that drips its headers or opens many
connections. What a production receiver must add: deploy/remediation/README.md, "Production".

Standalone (Python 3.11 standard library only). It reads a body only with a valid Content-Length up to
MAX_BODY_BYTES, arriving whole within READ_TIMEOUT_S (else 400/411/413/408); checks tailhound's signature
and timestamp window (``docs/webhooks.md``; 401); answers 409 to a redelivery or replay of a key it
handled (kept on disk while its request could pass the signature check, so across a restart too); and
turns an ``opened``/``updated`` notification asking for ``scale-out`` into a GET, then a merge-PATCH of
``spec.replicas`` = current + SCALE_STEP (at most MAX_REPLICAS), on the Deployment's ``scale``
subresource. Anything else gets 202 and is left alone.

Run it (in the cluster it uses the pod's service-account token and CA; the account needs ``get`` and
``patch`` on ``deployments/scale``, see deploy/remediation/README.md)::

    TAILHOUND_WEBHOOK_SECRET=... K8S_DEPLOYMENT=vllm-llama-70b MAX_REPLICAS=8 \\
        python3 deploy/remediation/receiver.py --port 8080

Settings (environment):
    TAILHOUND_WEBHOOK_SECRET or TAILHOUND_WEBHOOK_SECRET_FILE  the signing secret (required)
    LISTEN_HOST / LISTEN_PORT        default 127.0.0.1 / 8080 (--host / --port override; port 0 = any free);
                                     in a pod set LISTEN_HOST=0.0.0.0 so the Service can reach it
    K8S_API                          default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
    K8S_TOKEN_FILE / K8S_CA_FILE     default the in-cluster service-account token and CA
    K8S_NAMESPACE                    default the pod's namespace, else "default"
    K8S_DEPLOYMENT                   the Deployment to scale when the model has no mapping
    K8S_DEPLOYMENT_MAP               model -> Deployment, "llama-3-70b=vllm-llama-70b,mixtral=vllm-mixtral"
    SCALE_STEP / MAX_REPLICAS        default 1 / 10
    SIGNATURE_TOLERANCE_S            default 300 (replay window)
    DEDUP_MAX_KEYS                   default 10000 idempotency keys remembered (in memory); when all of them
                                     could still be replayed, a new key gets 503 + Retry-After (counted in
                                     GET /metrics), never a forgotten key
    REPLAY_CACHE_FILE                default $TMPDIR/tailhound-remediation-replay.json ("" = memory only)
    READ_TIMEOUT_S / MAX_BODY_BYTES  default 10 s / 1 MiB for a whole request body
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import logging
import os
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("tailhound.remediation")

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_BODY = 1 << 20
DEFAULT_REPLAY_FILE = Path(tempfile.gettempdir()) / "tailhound-remediation-replay.json"


# --- signature check (a copy of tailhound.notifier.signing.verify) ------------------------------------------------
class BadSignature(Exception):
    """The request is not from tailhound, was altered, or is outside the replay window."""


def verify(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, tolerance_s: float, now: float | None = None
) -> None:
    """Raise :class:`BadSignature` unless some ``v1=`` signature is HMAC-SHA256(secret, "<ts>." + body)."""
    try:
        ts = int((timestamp or "").strip())
    except ValueError:
        raise BadSignature("missing or malformed X-Tailhound-Timestamp") from None
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        raise BadSignature("timestamp outside the tolerance window (stale or replayed)")
    expected = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    offered = [
        v.strip() for k, _, v in (p.strip().partition("=") for p in (signature or "").split(",")[:8]) if k == "v1"
    ]
    if not any(hmac.compare_digest(v.encode(), expected.encode()) for v in offered):
        raise BadSignature("signature does not match")


# --- settings -------------------------------------------------------------------------------------------------------
@dataclass
class Config:
    secret: str
    k8s_api: str
    namespace: str
    deployment: str | None = None
    deployment_map: dict[str, str] = field(default_factory=dict)
    scale_step: int = 1
    max_replicas: int = 10
    token_file: Path | None = SA_DIR / "token"
    ca_file: Path | None = SA_DIR / "ca.crt"
    tolerance_s: float = 300
    dedup_max_keys: int = 10_000
    replay_file: Path | None = DEFAULT_REPLAY_FILE
    read_timeout_s: float = 10.0
    max_body: int = MAX_BODY
    host: str = "127.0.0.1"
    port: int = 8080

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Config:
        env = dict(os.environ if env is None else env)
        secret = env.get("TAILHOUND_WEBHOOK_SECRET", "")
        if not secret and env.get("TAILHOUND_WEBHOOK_SECRET_FILE"):
            secret = Path(env["TAILHOUND_WEBHOOK_SECRET_FILE"]).read_text(encoding="utf-8").strip()
        if not secret:
            raise SystemExit("set TAILHOUND_WEBHOOK_SECRET or TAILHOUND_WEBHOOK_SECRET_FILE")
        api = env.get("K8S_API") or "https://{}:{}".format(
            env.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc"), env.get("KUBERNETES_SERVICE_PORT", "443")
        )
        ns_file = SA_DIR / "namespace"
        namespace = env.get("K8S_NAMESPACE") or (ns_file.read_text().strip() if ns_file.is_file() else "default")
        mapping = dict(pair.split("=", 1) for pair in env.get("K8S_DEPLOYMENT_MAP", "").split(",") if "=" in pair)
        cfg = cls(
            secret=secret,
            k8s_api=api.rstrip("/"),
            namespace=namespace,
            deployment=env.get("K8S_DEPLOYMENT") or None,
            deployment_map={k.strip(): v.strip() for k, v in mapping.items()},
            scale_step=int(env.get("SCALE_STEP", "1")),
            max_replicas=int(env.get("MAX_REPLICAS", "10")),
            token_file=Path(env["K8S_TOKEN_FILE"]) if env.get("K8S_TOKEN_FILE") else SA_DIR / "token",
            ca_file=Path(env["K8S_CA_FILE"]) if env.get("K8S_CA_FILE") else SA_DIR / "ca.crt",
            tolerance_s=float(env.get("SIGNATURE_TOLERANCE_S", "300")),
            dedup_max_keys=int(env.get("DEDUP_MAX_KEYS", "10000")),
            replay_file=Path(replay) if (replay := env.get("REPLAY_CACHE_FILE", str(DEFAULT_REPLAY_FILE))) else None,
            read_timeout_s=float(env.get("READ_TIMEOUT_S", "10")),
            max_body=int(env.get("MAX_BODY_BYTES", MAX_BODY)),
            host=env.get("LISTEN_HOST") or "127.0.0.1",
            port=int(env.get("LISTEN_PORT", "8080")),
        )
        if min(cfg.scale_step, cfg.max_replicas, cfg.max_body) < 1 or not 0 < cfg.read_timeout_s <= 300:
            raise SystemExit("SCALE_STEP, MAX_REPLICAS, MAX_BODY_BYTES must be at least 1, READ_TIMEOUT_S in (0, 300]")
        return cfg


# --- Kubernetes -----------------------------------------------------------------------------------------------------
class KubeError(Exception):
    """A failed API call; `retryable` when a later attempt may succeed (5xx, 409 conflict, 429, network)."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class Kubernetes:
    """The two calls this program makes, on the Deployment ``scale`` subresource."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.ssl = None
        if cfg.k8s_api.startswith("https://"):
            cafile = str(cfg.ca_file) if cfg.ca_file and cfg.ca_file.is_file() else None
            self.ssl = ssl.create_default_context(cafile=cafile)

    def _call(self, method: str, deployment: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.cfg.k8s_api}/apis/apps/v1/namespaces/{self.cfg.namespace}/deployments/{deployment}/scale"
        headers = {"Accept": "application/json"}
        if self.cfg.token_file and self.cfg.token_file.is_file():  # re-read: projected tokens rotate
            headers["Authorization"] = "Bearer " + self.cfg.token_file.read_text().strip()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.ssl) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            text = exc.read()[:200].decode(errors="replace")
            retryable = exc.code in (409, 429) or exc.code >= 500
            raise KubeError(f"{method} {deployment}/scale: HTTP {exc.code}: {text}", retryable) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise KubeError(f"{method} {deployment}/scale: {exc}", True) from None

    def get_scale(self, deployment: str) -> dict[str, Any]:
        return self._call("GET", deployment)

    def set_replicas(self, deployment: str, replicas: int, resource_version: str | None) -> dict[str, Any]:
        patch: dict[str, Any] = {"spec": {"replicas": replicas}}
        if resource_version:  # optimistic concurrency: 409 if someone scaled in between
            patch["metadata"] = {"resourceVersion": resource_version}
        return self._call("PATCH", deployment, patch)


# --- idempotency keys, kept across a restart ----------------------------------------------------------------------
class ReplayCache:
    """Idempotency keys handled: a redelivery or replay of one gets 409, not a second action. In memory up to
    `max_keys` (tailhound redelivers for hours, freshly signed); in `path` (JSON, replaced atomically)
    those whose request could still pass the signature check (its timestamp + `window_s`), so a replay after
    a restart is refused too. Only a key past its window is ever forgotten to make room: when every key is
    inside it, :meth:`full_for` says how long until one leaves, and the request is refused meanwhile.
    An unreadable or unwritable file stops the receiver at startup."""

    def __init__(self, path: Path | None, window_s: float, max_keys: int, clock=time.time) -> None:
        self.path, self.window_s, self.max_keys, self.clock = path, window_s, max_keys, clock
        self.keys: OrderedDict[str, float] = OrderedDict()  # key -> until when its request could be replayed
        if path is not None:
            self._load(path)
            try:
                self.save()  # unwritable: fail now, not after the first scale-out
            except OSError as exc:
                raise SystemExit(f"cannot write the replay cache: {exc}") from None

    def full_for(self) -> float | None:
        """None when a new key fits (forgetting the oldest key whose replay window has passed, if need be);
        else the seconds until the first key leaves its window."""
        if len(self.keys) < self.max_keys:
            return None
        now = self.clock()
        expired = next((k for k, until in self.keys.items() if until < now), None)
        if expired is not None:
            del self.keys[expired]  # a replay of it fails the signature check: safe to forget
            return None
        return max(min(self.keys.values()) - now, 1.0)

    def add(self, key: str, request_ts: float) -> None:
        """A key not in `keys` was handled, for a request signed at `request_ts` (room made by :meth:`full_for`)."""
        self.keys[key] = request_ts + self.window_s
        self.save()

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        try:
            live = sorted((float(t), str(k)) for k, t in json.loads(path.read_bytes())["keys"].items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(
                f"{path}: unreadable replay cache ({exc}); remove it once {self.window_s:g} s have "
                "passed since the receiver stopped (no replay passes the signature check then)"
            ) from None
        now = self.clock()
        self.keys.update((k, t) for t, k in live[-self.max_keys :] if t >= now)

    def save(self) -> None:
        if self.path is None:
            return
        now = self.clock()
        data = json.dumps({"keys": {k: t for k, t in self.keys.items() if t >= now}}).encode()
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


# --- the remediation logic ------------------------------------------------------------------------------------------
class Remediator:
    """Verifies, de-duplicates and acts on one webhook request; returns (HTTP status, JSON answer)."""

    def __init__(self, cfg: Config, kube: Kubernetes | None = None) -> None:
        self.cfg = cfg
        self.kube = kube or Kubernetes(cfg)
        self.handled = ReplayCache(cfg.replay_file, cfg.tolerance_s, cfg.dedup_max_keys)
        self.lock = threading.Lock()  # one remediation at a time: no double scale-out on a redelivery race
        self.refused_full = 0  # requests refused because every remembered key could still be replayed

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        h = {k.lower(): v for k, v in headers.items()}
        try:
            verify(
                self.cfg.secret,
                h.get("x-tailhound-timestamp"),
                h.get("x-tailhound-signature"),
                body,
                self.cfg.tolerance_s,
            )
        except BadSignature as exc:
            return 401, {"error": str(exc)}
        try:
            doc = json.loads(body)
            key = doc["idempotency_key"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": "body is not a tailhound webhook payload"}
        if doc.get("schema_version") != 1:
            return 400, {"error": f"unsupported schema_version {doc.get('schema_version')!r}"}
        # The key in the signed body is the one to trust; the header must agree with it.
        if h.get("idempotency-key", key) != key:
            return 400, {"error": "Idempotency-Key header does not match the signed body"}
        with self.lock:
            if key in self.handled.keys:
                self.handled.keys.move_to_end(key)
                return 409, {"duplicate": key}
            wait = self.handled.full_for()
            if wait is not None:  # forgetting a key now would let its replay through: refuse instead
                self.refused_full += 1
                log.warning(
                    "replay cache full (%d keys inside the %g s window): %s refused for %.0f s",
                    len(self.handled.keys),
                    self.cfg.tolerance_s,
                    key,
                    wait,
                )
                return 503, {
                    "error": f"replay cache full ({self.cfg.dedup_max_keys} keys): retry later",
                    "retry_after_s": int(wait + 0.999),
                }
            status, answer = self.act(doc)
            if status < 300:  # failures are not remembered: the redelivery gets another try
                try:
                    self.handled.add(key, int(h["x-tailhound-timestamp"].strip()))
                except OSError as exc:  # done all the same; only a replay after a restart could repeat it
                    log.error("cannot write the replay cache %s: %s", self.cfg.replay_file, exc)
        return status, {"idempotency_key": key, **answer}

    def act(self, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        action = doc.get("requested_action") or {}
        if doc.get("kind") not in ("opened", "updated"):
            return 202, {"ignored": f"kind {doc.get('kind')!r}"}
        if action.get("type") != "scale-out":
            return 202, {"ignored": f"requested action {action.get('type')!r} is not handled here"}
        model = (action.get("target") or {}).get("model")
        deployment = self.cfg.deployment_map.get(model or "", self.cfg.deployment)
        if not deployment:
            return 202, {"ignored": f"no Deployment configured for model {model!r}"}
        try:
            scale = self.kube.get_scale(deployment)
            current = int(scale.get("spec", {}).get("replicas") or 0)
            wanted = min(current + self.cfg.scale_step, self.cfg.max_replicas)
            done = {
                "action": "scale-out",
                "namespace": self.cfg.namespace,
                "deployment": deployment,
                "from": current,
                "to": max(wanted, current),
                "capped": wanted < current + self.cfg.scale_step,
            }
            if wanted <= current:
                log.info("%s already at %d replicas (MAX_REPLICAS %d)", deployment, current, self.cfg.max_replicas)
                return 200, {**done, "scaled": False}
            self.kube.set_replicas(deployment, wanted, scale.get("metadata", {}).get("resourceVersion"))
        except KubeError as exc:
            log.warning("scale-out of %s failed: %s", deployment, exc)
            return (503 if exc.retryable else 424), {"error": str(exc)}
        log.info(
            "scaled %s/%s from %d to %d replicas (%s)",
            self.cfg.namespace,
            deployment,
            current,
            wanted,
            doc.get("group_id"),
        )
        return 200, {**done, "scaled": True}


# --- HTTP -----------------------------------------------------------------------------------------------------------
def make_server(cfg: Config, remediator: Remediator | None = None) -> ThreadingHTTPServer:
    """An HTTP server on (cfg.host, cfg.port): POST any path = a webhook, GET /healthz = liveness, GET /metrics
    = the replay cache's size and refusals (Prometheus text)."""
    remediator = remediator or Remediator(cfg)

    class Handler(BaseHTTPRequestHandler):
        server_version = "tailhound-remediation/1"
        timeout = cfg.read_timeout_s  # on the socket: no read (request line, headers, body) waits longer

        def _answer(self, status: int, doc: dict[str, Any]) -> None:
            if status >= 400:
                log.info("%s %s -> %d %s", self.command, self.path, status, doc.get("error", ""))
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 503:
                self.send_header("Retry-After", str(doc.get("retry_after_s", 5)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, status: int, error: str) -> None:
            self.close_connection = True  # what is left of the body, if anything, is not read
            self._answer(status, {"error": error})

        def _read_body(self) -> bytes | None:
            """The body, or None once refused: Content-Length required, <= max_body, whole within read_timeout_s."""
            lengths = {v.strip() for v in self.headers.get_all("Content-Length") or ()}
            if self.headers.get("Transfer-Encoding") or not lengths:
                return self._refuse(411, "a Content-Length is required")
            text = lengths.pop()
            if lengths or not (text.isascii() and text.isdigit()) or len(text) > 12:
                return self._refuse(400, "malformed Content-Length")
            length = int(text)
            if length > cfg.max_body:
                return self._refuse(413, f"body over {cfg.max_body} bytes")
            chunks, got, deadline = [], 0, time.monotonic() + cfg.read_timeout_s
            try:
                while got < length:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    self.connection.settimeout(left)
                    chunk = self.rfile.read1(min(length - got, 65536))
                    if not chunk:
                        return self._refuse(400, "body shorter than its Content-Length")
                    chunks.append(chunk)
                    got += len(chunk)
            except TimeoutError:
                return self._refuse(408, f"body not received within {cfg.read_timeout_s:g} s")
            finally:
                self.connection.settimeout(self.timeout)
            return b"".join(chunks)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                return self._metrics()
            self._answer(*((200, {"ok": True}) if self.path == "/healthz" else (404, {"error": "not found"})))

        def _metrics(self) -> None:
            text = (
                f"tailhound_remediation_replay_cache_keys {len(remediator.handled.keys)}\n"
                f"tailhound_remediation_replay_cache_max_keys {cfg.dedup_max_keys}\n"
                f'tailhound_remediation_refused_total{{reason="replay_cache_full"}} {remediator.refused_full}\n'
            )
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            if (body := self._read_body()) is None:
                return
            self._answer(*remediator.handle(dict(self.headers.items()), body))

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return ThreadingHTTPServer((cfg.host, cfg.port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tailhound remediation webhook: capacity -> Deployment scale-out")
    parser.add_argument("--host", help="listen address (env LISTEN_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (env LISTEN_PORT, default 8080)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(message)s")
    cfg = Config.from_env()
    cfg.host = args.host or cfg.host
    cfg.port = cfg.port if args.port is None else args.port
    server = make_server(cfg)
    host, port = server.server_address[:2]
    log.info(
        "listening on http://%s:%d (namespace %s, deployment %s, map %s, step %d, max %d, replay cache %s)",
        host,
        port,
        cfg.namespace,
        cfg.deployment,
        cfg.deployment_map,
        cfg.scale_step,
        cfg.max_replicas,
        cfg.replay_file or "in memory only",
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
