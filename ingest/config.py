"""``ingest.yaml``: where ``tailhound ingest`` listens, how it maps series to snapshots, and how it publishes.

Parsed strictly (unknown keys are errors naming the file and line); ``${VAR}`` / ``${VAR:-default}`` expand from
the environment. The broker and the topics come from the usual settings (``TAILHOUND_BROKER``,
``TAILHOUND_TOPIC_PREFIX``), as for the agent. Secrets never live here: the tokens Prometheus sends
(``authorization`` / ``basic_auth`` of its ``remote_write``) are read from files or an environment variable
named here (:class:`AuthConfig`), and a ``remote_write.bearer_tokens`` or ``basic_auth`` key in the file is an
error saying so.

A minimal file::

    listen: 0.0.0.0:9097            # POST /api/v1/write, GET /metrics, /-/healthy, /-/ready
    remote_write:
      grouping:
        node_labels: [node, Hostname, instance]
        sources: {dcgm-exporter: dcgm, vllm-serving: vllm}
    auth:
      bearer_token_file: /etc/tailhound/ingest-token
    federation:                     # optional: pull /federate instead of (or as well as) receiving
      url: http://prometheus:9090
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from tailhound.agents.config import PublishConfig
from tailhound.durations import Duration
from tailhound.errors import ConfigError
from tailhound.http_guard import ServerLimits
from tailhound.ingest.federation import FederationConfig
from tailhound.ingest.ha_dedup import HaConfig
from tailhound.ingest.receiver import IngestConfig
from tailhound.yamlfile import load_yaml_model, parse_yaml_model

#: a token file larger than this is not a token
MAX_SECRET_BYTES = 4096
DEFAULT_LISTEN = "127.0.0.1:9097"


class AuthConfig(BaseModel):
    """Where the credentials Prometheus must send come from (none configured: every request is accepted, so
    keep the port on loopback or a private network then)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bearer_token_file: Path | None = Field(default=None, description="A file holding one accepted bearer token.")
    bearer_token_files: list[Path] = Field(
        default_factory=list, description="More token files (several, to rotate tokens)."
    )
    bearer_token_env: str | None = Field(
        default="TAILHOUND_INGEST_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="An environment variable holding an accepted token (ignored when unset or empty).",
    )
    basic_auth_password_files: dict[str, Path] = Field(
        default_factory=dict, description="Basic-auth user -> file holding its password (remote_write basic_auth)."
    )

    def bearer_tokens(self, env: dict[str, str] | None = None) -> tuple[SecretStr, ...]:
        env = os.environ if env is None else env
        files = ([self.bearer_token_file] if self.bearer_token_file else []) + list(self.bearer_token_files)
        tokens = [_read_secret(f, "auth.bearer_token_file") for f in files]
        if self.bearer_token_env and env.get(self.bearer_token_env, "").strip():
            tokens.append(env[self.bearer_token_env].strip())
        return tuple(SecretStr(t) for t in tokens)

    def basic_auth(self) -> dict[str, SecretStr]:
        return {
            user: SecretStr(_read_secret(path, f"auth.basic_auth_password_files.{user}"))
            for user, path in self.basic_auth_password_files.items()
        }


def _read_secret(path: Path, key: str) -> str:
    try:
        raw = path.read_bytes()[: MAX_SECRET_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from exc
    text = raw.decode("utf-8", "replace").strip()
    if not text or len(raw) > MAX_SECRET_BYTES or "\n" in text:
        raise ConfigError(f"{key}: {path} must hold one secret on one line (at most {MAX_SECRET_BYTES} bytes)")
    return text


class IngestServiceConfig(BaseModel):
    """The whole of ``ingest.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen: str | None = Field(
        default=DEFAULT_LISTEN,
        pattern=r"^$|^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]*):\d{1,5}$",
        description="host:port of the HTTP server; empty: no server (federation only).",
    )
    path: str = Field(
        default="/api/v1/write",
        pattern=r"^/[A-Za-z0-9/._-]{0,200}$",
        description="The remote-write path (Prometheus' remote_write url).",
    )
    remote_write: IngestConfig = Field(default_factory=IngestConfig)
    ha: HaConfig | None = Field(default=None, description="Accept one replica of each HA pair of Prometheus.")
    auth: AuthConfig = Field(default_factory=AuthConfig)
    federation: FederationConfig | None = None
    publish: PublishConfig = Field(default_factory=PublishConfig)
    poll_s: Duration = Field(default=1.0, gt=0, le=60, description="How often settled scrapes are published.")
    max_concurrent_requests: int = Field(
        default=8, ge=1, le=1024, description="Requests decoded at once; more wait (then 503)."
    )
    http: ServerLimits = Field(
        default_factory=ServerLimits, description="Timeouts and connection limits of the HTTP server."
    )

    @field_validator("remote_write", mode="before")
    @classmethod
    def _no_secrets_here(cls, value: object) -> object:
        if isinstance(value, dict):
            for key in ("bearer_tokens", "basic_auth"):
                if value.get(key):
                    raise ValueError(
                        f"remote_write.{key}: secrets are not read from this file; name a file or an "
                        "environment variable under auth: (bearer_token_file, bearer_token_env, "
                        "basic_auth_password_files)"
                    )
        return value

    @model_validator(mode="after")
    def _some_input(self) -> IngestServiceConfig:
        if not self.listen and self.federation is None:
            raise ValueError("nothing to ingest: set listen (remote write) or federation (pull), or both")
        return self

    def receiver_config(self, env: dict[str, str] | None = None) -> IngestConfig:
        """The receiver's settings with the credentials read now (files, environment)."""
        return self.remote_write.model_copy(
            update={"bearer_tokens": self.auth.bearer_tokens(env), "basic_auth": self.auth.basic_auth()}
        )


def load_ingest_config(path: str | Path) -> IngestServiceConfig:
    return load_yaml_model(path, IngestServiceConfig, env=True)


def parse_ingest_config(text: str, origin: str = "ingest.yaml") -> IngestServiceConfig:
    return parse_yaml_model(text, IngestServiceConfig, origin, env=True)
