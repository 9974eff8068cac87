"""The worker's streams settings (``streams:`` in the settings file, ``TAILHOUND_STREAMS__*``): Faust tuning,
the table store and the bounds on fleet state; the defaults favour fast failover on a small group."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tailhound.durations import Duration
from tailhound.errors import ConfigError
from tailhound.snapshot import LIMITS

#: the shortest rebalance timeout a static member (streams.instance_id) gets: a static member that misses a
#: rebalance's deadline is not dropped like a dynamic one but starts the next rebalance when it rejoins, so it
#: needs a deadline a busy worker meets (5 s, the dynamic default, is tight on loaded machines).
STATIC_REBALANCE_TIMEOUT_S = 20.0


_TEMP_DIRS: list[Path] = []


def _temporary_data_dir() -> Path:
    """One temporary directory per process for workers without streams.data_dir, removed at exit."""
    if not _TEMP_DIRS:
        import atexit
        import shutil
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="tailhound-worker-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _TEMP_DIRS.append(path)
    return _TEMP_DIRS[0]


class StreamsSettings(BaseModel):
    """Faust worker tuning. The defaults favour fast failover on a small group."""

    model_config = ConfigDict(extra="forbid")

    app_id: str = "tailhound-streams"
    #: where Faust keeps its files (and the rocksdb store its tables). Unset: a temporary directory per worker
    #: process, removed at exit (the memory store rebuilds from the changelogs anyway); rocksdb needs it set.
    #: Never the working directory: nothing is written where the user did not name.
    data_dir: Path | None = None
    #: where the worker's tables live: "memory" (rebuilt from the changelogs on every start) or "rocksdb"
    #: (on disk under data_dir, for fleets whose state does not fit in memory; a restart reads the local
    #: database and only the changelog's tail). rocksdb needs the extra: pip install 'tailhound[rocksdb]'
    store: Literal["memory", "rocksdb"] = "memory"
    commit_interval_s: Duration = Field(default=1.0, gt=0)
    session_timeout_s: Duration = Field(default=10.0, gt=0)
    heartbeat_interval_s: Duration = Field(default=1.0, gt=0)
    #: How long the group coordinator waits for members on a rebalance. Faust's default (60 s)
    #: makes a fresh worker wait ~30 s before it gets partitions; 5 s joins in ~3 s.
    rebalance_timeout_s: Duration = Field(default=5.0, gt=0)
    log_level: str = "warning"
    #: logfmt or json (tailhound.logs); --log-format and TAILHOUND_LOG_FORMAT win over it, as --log-level and
    #: TAILHOUND_LOG_LEVEL over log_level
    log_format: Literal["logfmt", "json"] = "logfmt"
    #: load-aware baseline artifacts (`tailhound baseline fit`); rules comparing a signal with its
    #: baseline use the model for that signal when it covers the current load
    load_models: list[Path] = Field(default_factory=list)
    #: TTFT P99 service level per model (fnmatch patterns, first match wins): the `sla.ttft_p99` signal
    #: rules compare with. 1.5 s is where chat users notice (playbook); batch models can allow more.
    ttft_p99_sla_s: dict[str, Duration] = Field(default_factory=lambda: {"*": 1.5})
    #: the capacity file (`tailhound capacity --out`): per model, the thresholds a load test measured, as the
    #: `capacity.*` signals rules compare with (tailhound/capacity_file.py). Read at start; None: no such signals
    capacity_file: Path | None = None
    #: a snapshot dated more than this after its arrival (the wall clock when the worker takes it) is
    #: rejected (dead letter): one message from a clock years ahead must not move a node's clock
    max_future_skew_s: Duration = Field(default=300.0, ge=0)
    #: a snapshot dated more than this before it was sent (Kafka message timestamp) is rejected. Off by
    #: default: the simulator, the demo and `agent --from-recording` publish past event time on purpose
    max_age_s: Duration | None = Field(default=None, gt=0)
    #: a snapshot more than this ahead of both its arrival and its source's newest time is held apart until
    #: the source's next snapshots confirm it (tailhound.streams.processor), so one message cannot make the
    #: real ones look like redeliveries. 0: off
    max_source_jump_s: Duration = Field(default=30.0, ge=0)
    #: once a source's usual lead (event time minus the message's send time) is learned from its last
    #: snapshots, one dated more than this past it (or past its send time, for a source dated in the past) is
    #: held apart the same way (tailhound.streams.source_time)
    source_lead_tolerance_s: Duration = Field(default=2.0, gt=0)
    #: a node state record over this many bytes is not produced: the snapshot is dead-lettered
    #: (state_too_large). Below the producer's 1,000,000-byte request limit
    max_state_bytes: int = Field(default=LIMITS.max_state_bytes, gt=0, le=1_000_000)
    #: a node that sent nothing for this long (event time) is expired: its incidents resolve ("node gone")
    #: and its state is deleted. 0: never
    node_expiry_s: Duration = Field(default=3600.0, ge=0)
    #: at most this many nodes are kept per worker (state, latest values, table entry: ~12 KB each, see
    #: BENCHMARKS.md); past it the least recently seen node of the partition is evicted (its incidents resolve,
    #: "node gone", its table entry is deleted; if it sends again it starts fresh). Also the most nodes one
    #: model's aggregator tracks. 0: no cap
    max_nodes: int = Field(default=20_000, ge=0)
    #: at most this many models are aggregated per worker by the model stage; past it the least recently seen
    #: model is evicted the same way (its model-scope incidents resolve). 0: no cap
    max_models: int = Field(default=500, ge=0)
    #: telemetry messages over this size are rejected before they are decoded (other limits:
    #: tailhound.snapshot.LIMITS)
    max_message_bytes: int = Field(default=LIMITS.max_message_bytes, gt=0)
    #: how often the worker logs its intake counts (accepted, rejected by reason ...) at INFO when they
    #: changed. 0: never
    stats_interval_s: Duration = Field(default=60.0, ge=0)
    #: rule files are looked at this often and reloaded when they changed (0: no file watch; SIGHUP and
    #: POST /-/reload still reload), see tailhound.streams.reload
    rules_watch_s: Duration = Field(default=10.0, ge=0)
    #: host:port of the worker's HTTP endpoint (/metrics, /-/healthy, POST /-/reload); "" turns it off,
    #: port 0 takes a free port. Writes need the API token (notifier.api_token / api_token_file).
    web_listen: str = Field(default="127.0.0.1:9096", pattern=r"^$|^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]*):\d{1,5}$")
    #: copies of each table partition kept warm on other workers of the group (Faust standby replicas), so
    #: a failover resumes from a standby instead of replaying the changelog from zero; with one worker
    #: there is nowhere to keep them and this changes nothing
    standby_replicas: int = Field(default=1, ge=0, le=3)
    #: stable identity of this worker in its consumer group (Kafka static membership, KIP-345): a worker
    #: restarted with the same id within session_timeout_s gets its partitions back without a rebalance
    #: of the group. Set it from a pod ordinal or host name (the Kubernetes manifests use the pod name of
    #: a StatefulSet); "" joins as a dynamic member. Unique per worker.
    instance_id: str = Field(default="", max_length=200, pattern=r"^[A-Za-z0-9._-]*$")

    #: the roll-up publishes incident events in event-time order: an event waits until every telemetry
    #: and model-stage partition has passed its time (so the incidents do not depend on how partitions
    #: are spread over workers), but never longer than this many wall seconds. 0: arrival order, no wait
    rollup_max_delay_s: Duration = Field(default=10.0, ge=0, le=300)

    @property
    def effective_data_dir(self) -> Path:
        """data_dir, or (unset, memory store) this process's temporary one; rocksdb without one is an error."""
        if self.data_dir is not None:
            return self.data_dir
        if self.store == "rocksdb":
            raise ConfigError(
                "streams.store rocksdb keeps the tables on disk: name the directory with "
                "TAILHOUND_STREAMS__DATA_DIR (a persistent volume, one per worker)"
            )
        return _temporary_data_dir()

    @property
    def effective_rebalance_timeout_s(self) -> float:
        """rebalance_timeout_s, but at least STATIC_REBALANCE_TIMEOUT_S for a static member (instance_id)."""
        if self.instance_id:
            return max(self.rebalance_timeout_s, STATIC_REBALANCE_TIMEOUT_S)
        return self.rebalance_timeout_s
