"""Settings: ``TAILHOUND_*`` environment variables over an optional YAML file over defaults.

Nested fields use ``__`` in env names (``TAILHOUND_STREAMS__COMMIT_INTERVAL_S=1``). The YAML file is
named by ``--config FILE`` or ``TAILHOUND_CONFIG``. Secrets (Slack tokens, PagerDuty routing keys,
webhook secrets) are read from env or files named here, never from rule YAML, and are never logged.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tailhound.config_errors import validation_problem
from tailhound.durations import Duration
from tailhound.errors import ConfigFileError
from tailhound.resources import default_rules_dir
from tailhound.streams_settings import StreamsSettings
from tailhound.yamlfile import compose_strict, file_error, mapping_key, mapping_value, read_config_text

CONFIG_ENV = "TAILHOUND_CONFIG"
ENV_PREFIX = "TAILHOUND_"


class ConsoleSink(BaseModel):
    """The worker prints every incident event to its stdout."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True


class IncidentTopicSink(BaseModel):
    """The worker publishes every incident event to ``<prefix>incidents`` (key = incident id)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True


class SinksSettings(BaseModel):
    """Where incidents go. Receivers with credentials (Slack, PagerDuty, webhooks) join in the notifier."""

    model_config = ConfigDict(extra="forbid")

    console: ConsoleSink = Field(default_factory=ConsoleSink)
    incident_topic: IncidentTopicSink = Field(default_factory=IncidentTopicSink)


class NotifierSettings(BaseModel):
    """The notifier inside the worker: incidents in, one page per incident out (see notifier/)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    #: routing, receivers, grouping, inhibit rules, maintenance windows. None: the bundled
    #: ``tailhound example notifier`` (a console receiver only)
    config: Path | None = None
    #: hosts remediation webhooks may post to (``host`` or ``*.suffix``); a webhook receiver whose URL is
    #: not on this list is refused at start, so no rule or routing file alone can send data elsewhere
    webhook_allowed_hosts: list[str] = Field(default_factory=list)
    #: how often due groups are flushed and due deliveries attempted
    tick_s: Duration = Field(default=0.2, gt=0, le=10)
    #: ``host:port`` of the notifier's HTTP API (silences, groups, health; see notifier/api.py); ``[::1]:9095``
    #: for IPv6, port 0 for any free port (a second worker on the host). Empty: off.
    api_listen: str = Field(default="127.0.0.1:9095", pattern=r"^$|^([^\s:\[\]]*|\[[0-9A-Fa-f:.]+\]):\d{1,5}$")
    #: bearer token the API requires for writes (creating, expiring silences); env only
    #: (TAILHOUND_NOTIFIER__API_TOKEN), refused in a settings file, never logged or dumped
    api_token: SecretStr | None = Field(default=None, exclude=True, repr=False)
    #: a file holding that token (e.g. a mounted Kubernetes secret); the env variable wins over it
    api_token_file: Path | None = None
    #: with no token configured, allow writes anyway, but only while the API listens on loopback
    allow_unauthenticated_writes: bool = False
    runbook_url: str = "https://github.com/tailhound/tailhound/blob/main/docs/root-causes.md"
    #: serve the incident console (``/console``: incidents with charts, notifications, silences) on the API
    console: bool = True
    #: the console's external base URL (``https://tailhound.example/console``); when set, every notification
    #: links to ``<console_url>/incidents/<lead incident id>`` (its ``console`` link)
    console_url: str | None = None
    #: names the API answers to besides IP addresses, localhost and `console_url`'s host (``host``,
    #: ``*.suffix``, ``*`` = any): any other ``Host`` header gets 403, so DNS rebinding cannot read the console
    console_allowed_hosts: list[str] = Field(default_factory=list)

    def console_link_base(self) -> str | None:
        """Where notifications link to (and Alertmanager's generatorURL): `console_url`, else the console this
        API serves, as Prometheus derives its external URL: a wildcard listen address names this host."""
        if self.console_url:
            return self.console_url
        if not (self.console and self.api_listen):
            return None
        host, _, port = self.api_listen.rpartition(":")
        if port == "0":  # any free port: not known until the server binds, so no link rather than a wrong one
            return None
        if host in ("", "0.0.0.0", "[::]", "::"):
            host = socket.getfqdn() or "localhost"
        return f"http://{host}:{port}/console"

    @field_validator("api_listen")
    @classmethod
    def _check_port(cls, v: str) -> str:
        if v and int(v.rpartition(":")[2]) > 65535:
            raise ValueError(f"port of {v!r} is above 65535")
        return v

    @field_validator("console_url")
    @classmethod
    def _check_console_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        parsed = urlsplit(v.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname or any(c.isspace() for c in v.strip()):
            raise ValueError(f"console_url {v[:200]!r} is not an http(s) URL with a host")
        if parsed.query or parsed.fragment:
            raise ValueError("console_url is a base URL: no query or fragment (/incidents/<id> is appended)")
        return v.strip().rstrip("/")


class IngestSettings(BaseModel):
    """Prometheus' samples in, inside the worker (``tailhound ingest`` runs the same on its own)."""

    model_config = ConfigDict(extra="forbid")

    #: ingest.yaml (remote-write receiver and/or federation pull, docs/prometheus.md); None: the worker does
    #: not ingest (TAILHOUND_INGEST__CONFIG)
    config: Path | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TAILHOUND_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    #: ``kafka://host:9092[,host2:9092]``. Empty: commands that need a broker start the bundled one.
    broker: str | None = None
    topic_prefix: str = Field(default="tailhound.", pattern=r"^[A-Za-z0-9._-]*$")
    #: Partitions of the telemetry topic (and of every table changelog keyed like it).
    partitions: int = Field(default=4, ge=1, le=1024)
    #: Replicas of every topic tailhound creates (its own and the worker's table changelogs). 1 on the bundled
    #: broker; 3 on a production Kafka (README, "Production: a real Kafka").
    replication_factor: int = Field(default=1, ge=1, le=32)
    rules_dir: Path = Field(default_factory=lambda: default_rules_dir())
    streams: StreamsSettings = Field(default_factory=StreamsSettings)
    sinks: SinksSettings = Field(default_factory=SinksSettings)
    notifier: NotifierSettings = Field(default_factory=NotifierSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)

    @field_validator("broker")
    @classmethod
    def _check_broker(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        bootstrap_servers(v)  # raises on a malformed URL
        return v.strip()

    # --- topics -------------------------------------------------------------------------------
    @property
    def telemetry_topic(self) -> str:
        return f"{self.topic_prefix}telemetry"

    @property
    def incidents_topic(self) -> str:
        return f"{self.topic_prefix}incidents"

    @property
    def deadletter_topic(self) -> str:
        return f"{self.topic_prefix}deadletter"

    @property
    def model_topic(self) -> str:
        """Engine snapshots keyed by model, for the model stage (model- and fleet-scope rules)."""
        return f"{self.topic_prefix}model-telemetry"

    @property
    def node_incidents_topic(self) -> str:
        """Incident events of the node and model stages, for the roll-up (one partition, internal)."""
        return f"{self.topic_prefix}node-incidents"

    @property
    def notifier_state_topic(self) -> str:
        """The notifier's durable state (groups, delivery logs, silences), keyed, compacted."""
        return f"{self.topic_prefix}notifier-state"

    @property
    def topics(self) -> list[str]:
        return [self.telemetry_topic, self.incidents_topic, self.deadletter_topic, self.notifier_state_topic]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, file_secret_settings)


def bootstrap_servers(url: str) -> list[str]:
    """``kafka://a:9092,b:9092`` (or ``a:9092;b:9092``) -> ``["a:9092", "b:9092"]``."""
    out = []
    for part in url.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if "://" in part:
            scheme, _, part = part.partition("://")
            if scheme not in ("kafka", "tcp"):
                raise ValueError(f"broker URL scheme must be kafka://, got {scheme}://")
        host, sep, port = part.rstrip("/").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"broker address must look like kafka://host:9092, got {url!r}")
        out.append(f"{host}:{port}")
    if not out:
        raise ValueError(f"no broker address in {url!r}")
    return out


def load_settings(config_file: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Build settings from (highest first) `overrides`, env, the YAML config file, defaults. Errors name the
    file, line and key (``FILE:LINE:COL: streams.app_idd: unknown key (did you mean 'app_id'?)``) or the
    environment variable (``TAILHOUND_STREAMS__APP_IDD``)."""
    path = config_file or os.environ.get(CONFIG_ENV)
    file_values, node, origin = read_settings_file(path) if path else ({}, None, "")
    try:
        env_values = Settings().model_dump(exclude_unset=True)  # only what TAILHOUND_* env set
    except ValidationError as exc:
        problems = [
            validation_problem(err, None, "environment", Settings, env_prefix=ENV_PREFIX) for err in exc.errors()
        ]
        raise file_error("environment", problems) from exc
    merged = _deep_merge(_deep_merge(file_values, env_values), overrides)
    try:
        return Settings(**merged)
    except ValidationError as exc:
        problems = [
            validation_problem(
                err,
                node,
                origin or "environment",
                Settings,
                env_prefix=ENV_PREFIX if _has(env_values, err["loc"]) or not origin else None,
            )
            for err in exc.errors()
        ]
        raise file_error(origin or "environment", problems) from exc


def read_settings_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], yaml.Node | None, str]:
    """(values, YAML node tree, origin) of a settings file; ConfigFileError when it cannot be used."""
    p = Path(path)
    text = read_config_text(p, ConfigFileError, "cannot read settings file")
    node, loaded = compose_strict(text, str(p))
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigFileError(str(p), 1, "a settings file is a mapping of settings (broker, streams, notifier, ...)")
    token = mapping_key(mapping_value(node, "notifier"), "api_token")
    if token is not None:
        raise ConfigFileError(
            str(p),
            token.start_mark.line + 1,
            "notifier.api_token is never read from a settings "
            "file; set TAILHOUND_NOTIFIER__API_TOKEN or notifier.api_token_file",
            column=token.start_mark.column + 1,
        )
    return loaded or {}, node, str(p)


def check_settings_file(path: str | os.PathLike[str]) -> Settings:
    """What ``tailhound check`` runs on a settings file: the file alone, without the environment."""
    values, node, origin = read_settings_file(path)
    try:  # model_validate reads no environment: the checking shell's is not the process's
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise file_error(origin, [validation_problem(err, node, origin, Settings) for err in exc.errors()]) from exc


def _has(values: dict[str, Any], loc: tuple[Any, ...]) -> bool:
    """Whether the location `loc` was set in `values` (the environment's)."""
    for part in loc:
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return bool(loc)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
