#!/usr/bin/env python3
"""Example remediation endpoint for tailhound webhooks: scales out a Deployment on a `capacity` incident.

A small standalone program (Python 3.11 standard library only; tailhound need not be installed). It
listens for tailhound's signed webhook requests (``docs/webhooks.md``), checks the signature and the
timestamp window (401 otherwise), drops redeliveries of an idempotency key it already handled (409),
and turns an ``opened``/``updated`` notification whose ``requested_action`` is ``scale-out`` into a
Kubernetes scale-out: GET, then merge-PATCH ``spec.replicas`` = current + SCALE_STEP (at most
MAX_REPLICAS) on ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``. Everything else is
acknowledged with 202 and left alone.

Run it (in the cluster it uses the pod's service-account token and CA; the account needs ``get`` and
``patch`` on ``deployments/scale``, see deploy/remediation/README.md)::

    TAILHOUND_WEBHOOK_SECRET=... K8S_DEPLOYMENT=vllm-llama-70b MAX_REPLICAS=8 \\
        python3 deploy/remediation/receiver.py --port 8080

Settings (environment):
    TAILHOUND_WEBHOOK_SECRET or TAILHOUND_WEBHOOK_SECRET_FILE  the signing secret (required)
    LISTEN_HOST / LISTEN_PORT        default 0.0.0.0 / 8080 (--host / --port override; port 0 = any free)
    K8S_API                          default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
    K8S_TOKEN_FILE / K8S_CA_FILE     default the in-cluster service-account token and CA
    K8S_NAMESPACE                    default the pod's namespace, else "default"
    K8S_DEPLOYMENT                   the Deployment to scale when the model has no mapping
    K8S_DEPLOYMENT_MAP               model -> Deployment, "llama-3-70b=vllm-llama-70b,mixtral=vllm-mixtral"
    SCALE_STEP / MAX_REPLICAS        default 1 / 10
    SIGNATURE_TOLERANCE_S            default 300 (replay window)
    DEDUP_MAX_KEYS                   default 10000 idempotency keys remembered (in memory)
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
import ssl
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


# --- signature check (a copy of tailhound.notifier.signing.verify) ------------------------------------------------
class BadSignature(Exception):
    """The request is not from tailhound, was altered, or is outside the replay window."""


def verify(secret: str, timestamp: str | None, signature: str | None, body: bytes, tolerance_s: float,
           now: float | None = None) -> None:
    """Raise :class:`BadSignature` unless some ``v1=`` signature is HMAC-SHA256(secret, "<ts>." + body)."""
    try:
        ts = int((timestamp or "").strip())
    except ValueError:
        raise BadSignature("missing or malformed X-Tailhound-Timestamp") from None
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        raise BadSignature("timestamp outside the tolerance window (stale or replayed)")
    expected = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    offered = [v.strip() for k, _, v in (p.strip().partition("=") for p in (signature or "").split(",")[:8])
               if k == "v1"]
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
    host: str = "0.0.0.0"
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
            env.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc"), env.get("KUBERNETES_SERVICE_PORT", "443"))
        ns_file = SA_DIR / "namespace"
        namespace = env.get("K8S_NAMESPACE") or (ns_file.read_text().strip() if ns_file.is_file() else "default")
        mapping = dict(pair.split("=", 1) for pair in env.get("K8S_DEPLOYMENT_MAP", "").split(",") if "=" in pair)
        cfg = cls(
            secret=secret, k8s_api=api.rstrip("/"), namespace=namespace,
            deployment=env.get("K8S_DEPLOYMENT") or None,
            deployment_map={k.strip(): v.strip() for k, v in mapping.items()},
            scale_step=int(env.get("SCALE_STEP", "1")), max_replicas=int(env.get("MAX_REPLICAS", "10")),
            token_file=Path(env["K8S_TOKEN_FILE"]) if env.get("K8S_TOKEN_FILE") else SA_DIR / "token",
            ca_file=Path(env["K8S_CA_FILE"]) if env.get("K8S_CA_FILE") else SA_DIR / "ca.crt",
            tolerance_s=float(env.get("SIGNATURE_TOLERANCE_S", "300")),
            dedup_max_keys=int(env.get("DEDUP_MAX_KEYS", "10000")),
            host=env.get("LISTEN_HOST", "0.0.0.0"), port=int(env.get("LISTEN_PORT", "8080")),
        )
        if cfg.scale_step < 1 or cfg.max_replicas < 1:
            raise SystemExit("SCALE_STEP and MAX_REPLICAS must be at least 1")
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


# --- the remediation logic ------------------------------------------------------------------------------------------
class Remediator:
    """Verifies, de-duplicates and acts on one webhook request; returns (HTTP status, JSON answer)."""

    def __init__(self, cfg: Config, kube: Kubernetes | None = None) -> None:
        self.cfg = cfg
        self.kube = kube or Kubernetes(cfg)
        self.seen: OrderedDict[str, int] = OrderedDict()  # idempotency key -> status answered
        self.lock = threading.Lock()  # one remediation at a time: no double scale-out on a redelivery race

    def handle(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        h = {k.lower(): v for k, v in headers.items()}
        try:
            verify(self.cfg.secret, h.get("x-tailhound-timestamp"), h.get("x-tailhound-signature"), body,
                   self.cfg.tolerance_s)
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
            if key in self.seen:
                self.seen.move_to_end(key)
                return 409, {"duplicate": key}
            status, answer = self.act(doc)
            if status < 300:  # failures are not remembered: the redelivery gets another try
                self.seen[key] = status
                while len(self.seen) > self.cfg.dedup_max_keys:
                    self.seen.popitem(last=False)
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
            done = {"action": "scale-out", "namespace": self.cfg.namespace, "deployment": deployment,
                    "from": current, "to": max(wanted, current), "capped": wanted < current + self.cfg.scale_step}
            if wanted <= current:
                log.info("%s already at %d replicas (MAX_REPLICAS %d)", deployment, current, self.cfg.max_replicas)
                return 200, {**done, "scaled": False}
            self.kube.set_replicas(deployment, wanted, scale.get("metadata", {}).get("resourceVersion"))
        except KubeError as exc:
            log.warning("scale-out of %s failed: %s", deployment, exc)
            return (503 if exc.retryable else 424), {"error": str(exc)}
        log.info("scaled %s/%s from %d to %d replicas (%s)", self.cfg.namespace, deployment, current, wanted,
                 doc.get("group_id"))
        return 200, {**done, "scaled": True}


# --- HTTP -----------------------------------------------------------------------------------------------------------
def make_server(cfg: Config, remediator: Remediator | None = None) -> ThreadingHTTPServer:
    """An HTTP server on (cfg.host, cfg.port): POST any path = a webhook, GET /healthz = liveness."""
    remediator = remediator or Remediator(cfg)

    class Handler(BaseHTTPRequestHandler):
        server_version = "tailhound-remediation/1"

        def _answer(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 503:
                self.send_header("Retry-After", "5")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(*((200, {"ok": True}) if self.path == "/healthz" else (404, {"error": "not found"})))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(413, {"error": "body too large"})
                return
            body = self.rfile.read(length)
            status, answer = remediator.handle(dict(self.headers.items()), body)
            if status >= 400:
                log.info("%s %s -> %d %s", self.command, self.path, status, answer.get("error", ""))
            self._answer(status, answer)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return ThreadingHTTPServer((cfg.host, cfg.port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tailhound remediation webhook: capacity -> Deployment scale-out")
    parser.add_argument("--host", help="listen address (env LISTEN_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="listen port (env LISTEN_PORT, default 8080)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(message)s")
    cfg = Config.from_env()
    cfg.host = args.host or cfg.host
    cfg.port = cfg.port if args.port is None else args.port
    server = make_server(cfg)
    host, port = server.server_address[:2]
    log.info("listening on http://%s:%d (namespace %s, deployment %s, map %s, step %d, max %d)", host, port,
             cfg.namespace, cfg.deployment, cfg.deployment_map, cfg.scale_step, cfg.max_replicas)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
