"""``agent.yaml``: which collectors one agent runs, where its metrics listen and how it publishes.

Parsed strictly (unknown keys are errors naming the file and line); ``${VAR}`` / ``${VAR:-default}``
expand from the environment (the DaemonSet passes NODE_NAME and NODE_IP). The broker and topic prefix
come from the usual settings (``TAILHOUND_BROKER``, ``TAILHOUND_TOPIC_PREFIX``), not from this file.
Secrets never live here: headers that carry tokens name an environment variable (``headers_from_env``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tailhound.agents.collectors.hops import HopsConfig
from tailhound.agents.collectors.nginx import NginxConfig
from tailhound.agents.collectors.nvml import NvmlConfig
from tailhound.agents.collectors.procnet import ProcNetConfig
from tailhound.agents.collectors.scrape import ScrapeTarget
from tailhound.agents.collectors.streamprobe import StreamProbeConfig
from tailhound.agents.collectors.tcpconnect import TcpConnectConfig
from tailhound.agents.wire import DEFAULT_WIRE
from tailhound.durations import Duration, Milliseconds
from tailhound.yamlfile import load_yaml_model, parse_yaml_model


class OutboxConfig(BaseModel):
    """The bounded buffer that rides out broker outages (see agents/buffer.py)."""

    model_config = ConfigDict(extra="forbid")

    max_messages: int = Field(default=100_000, ge=1)
    max_bytes: int = Field(default=64 << 20, ge=1024)
    spill_file: Path | None = Field(default=None, description="Overflow and restart file (optional).")
    spill_max_bytes: int = Field(default=1 << 30, ge=1024)


class PublishConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_max: int = Field(default=500, ge=1, description="Snapshots per send.")
    linger_ms: Milliseconds = Field(
        default=100, ge=0, description="Wait this long to batch snapshots into one request."
    )
    compression: Literal["lz4", "zstd", "gzip", "none"] = Field(
        default="lz4", description="Kafka batch compression (lz4: ~10x cheaper in CPU than gzip, similar size)."
    )
    request_timeout_s: Duration = Field(
        default=120.0, gt=0, description="How long one send may wait for the broker before it is retried."
    )
    bundle: bool | None = Field(
        default=None,
        description=(
            "Publish the snapshots of one tick as one message per node: the worker handles a node's tick in one "
            "message instead of one per source (~13% less of its CPU, BENCHMARKS.md, Peer). Unset: on with wire 3 "
            "(every worker that reads version 3 reads its bundles, several parts in one message), off with wire 1 "
            "(a version-1 bundle is telemetry version 2, which workers before bundles reject)."
        ),
    )
    wire: Literal[1, 3] = Field(
        default=DEFAULT_WIRE,
        description=(
            "Telemetry version published: 3 is compact MessagePack (label sets and bucket layouts once per "
            "snapshot, values as arrays: about 0.6x the bytes of version 1 after compression, decoded ~10x "
            "faster), 1 is JSON. Workers before version 3 reject it (dead letter): upgrade the workers first, "
            "or set 1 until every worker reads version 3."
        ),
    )
    layout_every_s: Duration = Field(
        default=300.0,
        ge=0,
        description=(
            "With wire 3: send each source's layout (labels, names, bucket bounds) once and then only its values, "
            "about a third of version 1's bytes (0.6x with every layout sent). Workers keep the layouts in their "
            "layouts table, so one that restarts or takes the node over reads the values at once; the layout goes "
            "again at least this often for a worker that has no copy (a new consumer group, a worker from before "
            "the table: its snapshots until then are dead letters, unknown_layout). 0: every message carries its "
            "layout."
        ),
    )
    buffer: OutboxConfig = Field(default_factory=OutboxConfig)

    @property
    def bundles(self) -> bool:
        """Whether the sender bundles: `bundle`, or when unset, whether the wire is version 3."""
        return self.bundle if self.bundle is not None else self.wire == 3


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str | None = Field(default=None, pattern=r"^\S+$", description="This node's name (default: hostname).")
    labels: dict[str, str] = Field(default_factory=dict, description="Added to every snapshot (cluster, region).")
    listen: str | None = Field(
        default="127.0.0.1:9464",
        pattern=r"^[^:\s]*:\d+$",
        description="host:port of the agent's own /metrics; null turns it off.",
    )
    scrape: list[ScrapeTarget] = Field(default_factory=list)
    nvml: NvmlConfig | None = None
    procnet: ProcNetConfig | None = None
    tcp_connect: TcpConnectConfig | None = None
    hops: HopsConfig | None = None
    nginx: list[NginxConfig] = Field(default_factory=list)
    stream_probe: list[StreamProbeConfig] = Field(default_factory=list)
    publish: PublishConfig = Field(default_factory=PublishConfig)


def load_agent_config(path: str | Path) -> AgentConfig:
    return load_yaml_model(path, AgentConfig, env=True)


def parse_agent_config(text: str, origin: str = "agent.yaml") -> AgentConfig:
    return parse_yaml_model(text, AgentConfig, origin, env=True)
