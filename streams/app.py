"""Faust wiring, kept thin: topics and a table in, :func:`tailhound.streams.evaluator.evaluate` in the middle,
incidents and dead letters out.

Where things are:
- telemetry enters in :func:`create_app`'s ``evaluate`` agent (topic ``<prefix>telemetry``, key = node), which
  hands each message to :class:`tailhound.streams.node_stage.NodeStage` (admission, the step, forwards, expiry);
- rules fire in :func:`tailhound.streams.evaluator.evaluate` (pure, state per node in the ``node-state`` table,
  changelogged so a restarted worker resumes where it stopped), called through
  :class:`tailhound.streams.processor.SnapshotProcessor`, the same step offline replay
  (:mod:`tailhound.streams.replay`) uses;
- engine snapshots are forwarded, keyed by model, to ``<prefix>model-telemetry`` (:mod:`tailhound.streams.
  model_forward`), where the ``model-stage`` agent hands each message to
  :class:`tailhound.streams.model_stage_handler.ModelStageHandler` (model- and fleet-scope rules);
- incidents leave on ``<prefix>incidents`` keyed by incident id, bad messages on ``<prefix>deadletter``: over
  the size limit, not decodable, over a limit (:data:`tailhound.snapshot.LIMITS`), keyed by another node, or
  dated too far from their arrival (:mod:`tailhound.streams.intake`: no single message moves a node's clock),
  every rejection counted by reason (:func:`intake_stats`); a dead letter that cannot be produced is logged
  and counted, never fatal;
- a node silent for ``streams.node_expiry_s`` of event time is expired (its incidents resolve, "node gone",
  and its state is deleted) while a message of its partition is processed;
- node- and model-stage incident events meet in the ``rollup`` agent (one partition, :mod:`tailhound.streams.
  rollup_agent`), which takes them in event-time order, whatever worker sent them (the stages publish their
  partitions' watermarks next to their events, :mod:`tailhound.streams.rollup.order`), and publishes one
  incident per fault; with several workers of one group, every partition runs on exactly one of them;
- pages leave from the notifier (:mod:`tailhound.notifier.service`), which :mod:`tailhound.worker.compose` adds to
  this app as a task unless ``notifier.enabled`` is false (of several workers, one is the active notifier).
"""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Callable
from typing import Any

import faust
from aiokafka.partitioner import DefaultPartitioner
from prometheus_client import CollectorRegistry

from tailhound.capacity_file import capacity_limits
from tailhound.catalog import Catalog, default_catalog
from tailhound.console import ConsoleSink
from tailhound.settings import Settings
from tailhound.snapshot import Snapshot

from . import codec, gc_freeze
from .fleet_cap import MODEL
from .gc_freeze import GC_GEN0_THRESHOLD, WarmupFreeze, last_freeze_for
from .intake import (
    DeadLetters,
    Gate,
    IntakeStats,
    NodeExpiry,
    TimeBounds,
)
from .layout_store import StoredLayouts, memory_bound
from .model_stage import ModelStage, split_rules
from .model_stage_handler import ModelStageHandler
from .node_stage import NodeStage
from .pipeline_metrics import PipelineMetrics
from .processor import SnapshotProcessor, read_load_models
from .rollup.agent import ProgressMarks, add_rollup, send_tick
from .rollup.order import TICK_KEY, EventOrder
from .ruleset.rulefile import RuleSet

log = logging.getLogger(__name__)

STATE_TABLE = "node-state"
MODEL_STATE_TABLE = "model-state"
ROLLUP_STATE_TABLE = "rollup-state"
LAYOUT_TABLE = "layouts"


def create_app(
    settings: Settings,
    rules: RuleSet,
    catalog: Catalog | None = None,
    on_snapshot: Callable[[Snapshot], object] | None = None,
    registry: CollectorRegistry | None = None,
) -> faust.App:
    """The streams app; `on_snapshot` sees every valid telemetry snapshot before it is evaluated (the
    worker's rule coverage, :mod:`tailhound.streams.coverage_watch`; it must be cheap and never raise)."""
    if not settings.broker:
        raise ValueError("create_app needs settings.broker (the CLI starts the embedded broker first)")
    catalog = catalog or default_catalog()
    s = settings.streams
    app = faust.App(
        s.app_id,
        broker=settings.broker,
        store=_store_url(settings),
        datadir=str(s.effective_data_dir),
        autodiscover=False,
        web_enabled=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        topic_allow_declare=True,
        table_standby_replicas=s.standby_replicas,
        consumer_group_instance_id=s.instance_id or None,
        broker_commit_interval=s.commit_interval_s,
        broker_session_timeout=s.session_timeout_s,
        broker_heartbeat_interval=s.heartbeat_interval_s,
        broker_rebalance_timeout=s.effective_rebalance_timeout_s,
        consumer_auto_offset_reset="earliest",
        # Faust's check that a table's offsets are not past its changelog's end: the bundled broker reports the
        # end of a topic too low after batched writes (120 > 119), and with standby copies (offsets kept across
        # rebalances) every worker whose partitions came back crashed on it, round after round (the 3-worker
        # kill drill). With the memory store the offsets are the process's own; for RocksDB, see
        # docs/operations.md (Table store): empty data_dir when the changelogs are lost
        recovery_consistency_check=False,
    )
    # values stay bytes until an agent takes them (and decodes them with tailhound.streams.codec): with the codec on
    # the topic, Faust decodes each message when it is fetched and a backlog keeps up to
    # stream_buffer_maxsize (4096) decoded snapshots alive in the stream's buffer, ~1 KB of objects each
    # for every garbage collection to walk
    telemetry = app.topic(
        settings.telemetry_topic, key_serializer="raw", value_serializer="raw", partitions=settings.partitions
    )
    incidents = app.topic(settings.incidents_topic, key_serializer="raw", value_serializer="raw", partitions=1)
    node_incidents = app.topic(
        settings.node_incidents_topic, key_serializer="raw", value_serializer="raw", partitions=1
    )
    rollup_state = _state_table(app, ROLLUP_STATE_TABLE, 1)
    deadletter = app.topic(settings.deadletter_topic, key_serializer="raw", value_serializer="raw")
    console = ConsoleSink() if settings.sinks.console.enabled else None
    state = _state_table(app, STATE_TABLE, settings.partitions)
    node_rules, model_rules = split_rules(rules)
    load = read_load_models(settings.streams.load_models)
    # service levels, and the load-tested thresholds of the capacity file (a bad file stops the start, naming it)
    sla = {"ttft_p99_sla_s": settings.streams.ttft_p99_sla_s, **capacity_limits(settings.streams.capacity_file)}
    processor = SnapshotProcessor(
        node_rules,
        catalog,
        load,
        sla=sla,
        max_jump_s=s.max_source_jump_s or None,
        lead_tolerance_s=s.source_lead_tolerance_s,
        max_state_bytes=s.max_state_bytes,
        max_nodes=s.max_nodes or None,
    )
    metrics = PipelineMetrics(registry) if registry is not None else None  # tailhound.streams.pipeline_metrics
    if metrics is not None:
        processor.timings = metrics.stage_seconds
    model_stage = ModelStage(
        model_rules,
        catalog=catalog,
        load_models=load,
        sla=sla,
        max_models=s.max_models or None,
        max_nodes=s.max_nodes or None,
    )
    model_topic = app.topic(
        settings.model_topic, key_serializer="raw", value_serializer="raw", partitions=settings.partitions
    )
    model_state = _state_table(app, MODEL_STATE_TABLE, settings.partitions)

    def swap_rules(new: RuleSet) -> None:
        """A rule reload (:mod:`tailhound.streams.reload`): the next snapshots are judged with `new`."""
        node_new, model_new = split_rules(new)
        processor.replace_rules(node_new)
        model_stage.replace_rules(model_new)

    _SWAPPERS[app] = swap_rules
    stats = _STATS[app] = IntakeStats()
    model_stage.on_evict = lambda kind, name: stats.evictions.evicted(
        kind, name, s.max_models if kind == MODEL else s.max_nodes
    )
    order = EventOrder(s.rollup_max_delay_s)  # the roll-up's event-time order (tailhound.streams.rollup.order)
    # the stages' watermarks, for that order
    marks = ProgressMarks(node_incidents.send, order.enabled, model_partition_of=lambda key: partition_of(key))
    bounds = TimeBounds(s.max_future_skew_s, s.max_age_s)
    # the version-3 layouts read in full, also in a table: a worker that restarts or takes a partition over reads
    # the values-only parts at once (tailhound.streams.layout_store)
    table = _state_table(app, LAYOUT_TABLE, settings.partitions)
    gate = Gate(bounds, s.max_message_bytes, stats, StoredLayouts(table, memory_bound(s.max_nodes), stats.layouts))
    letters = DeadLetters(deadletter.send, stats)
    expiry_s = s.node_expiry_s
    expiry = NodeExpiry(expiry_s)
    partitioner = DefaultPartitioner()
    all_partitions = list(range(settings.partitions))

    async def stage(events: list) -> None:
        """Node- and model-stage incident events go to the roll-up, which publishes what people see."""
        for ev in events:
            await node_incidents.send(key=ev.key(), value=ev.model_dump_json().encode())

    async def publish(events: list) -> None:
        for ev in events:
            log.info("incident %s %s %s %s", ev.incident_id, ev.event, ev.root_cause, ev.scope.describe())
            if metrics is not None:
                metrics.published(ev)
            if settings.sinks.incident_topic.enabled:
                await incidents.send(key=ev.key(), value=ev.model_dump_json().encode())
            if console is not None:
                console.deliver(ev)

    async def dead_letter(message: Any, reason: str, stage: str, kind: str) -> None:
        await letters.publish(message, reason, stage, kind)

    def partition_of(node: str) -> int:
        """The partition a node's telemetry goes to with Kafka's default partitioner (what the agents use);
        for states stored before they named their partition."""
        return partitioner(node.encode(), all_partitions, all_partitions)

    node_stage = NodeStage(
        processor=processor,
        state=state,
        gate=gate,
        bounds=bounds,
        letters=letters,
        stats=stats,
        expiry=expiry,
        marks=marks,
        model_stage=model_stage,
        forward=model_topic.send,
        stage=stage,
        partition_of=partition_of,
        max_nodes=s.max_nodes,
        metrics=metrics,
        on_snapshot=on_snapshot,
    )

    # the state built by the first messages, out of the collector's way
    freezer = WarmupFreeze(last=last_freeze_for(s.max_nodes))

    @app.agent(telemetry, name="evaluate")
    async def evaluate_agent(stream: faust.StreamT) -> None:
        async for event in stream.events():
            await node_stage.handle(event.message)
            freezer.seen()

    if s.stats_interval_s:
        logged: dict[str, Any] = {}

        @app.timer(interval=s.stats_interval_s)
        async def log_stats() -> None:
            """The intake counts at INFO, when they changed."""
            now = stats.as_dict()
            if now != logged:
                logged.clear()
                logged.update(now)
                log.info("%s", stats.describe())

    model_handler = ModelStageHandler(
        model_stage=model_stage, store=model_state, marks=marks, stats=stats, stage=stage, metrics=metrics
    )

    @app.agent(model_topic, name="model-stage")
    async def model_agent(stream: faust.StreamT) -> None:
        async for event in stream.events():
            await model_handler.handle(event.message)

    add_rollup(app, node_incidents, rollup_state, order, publish, dead_letter, stats, metrics)

    if model_stage.enabled:

        @app.timer(interval=1.0)
        async def model_tick() -> None:
            """Wall time for the model stage, on every partition (whichever worker holds it)."""
            for p in all_partitions:  # (a tick that cannot be sent is skipped: the timer outlives broker trouble)
                await send_tick(model_topic.send(key=TICK_KEY, value=b"", partition=p), "model stage")

    @app.on_partitions_assigned.connect
    async def forget_moved(_app: faust.App, assigned: set, **_kw: Any) -> None:
        marks.reassigned(
            assigned, settings.telemetry_topic, settings.model_topic, settings.partitions, processor, model_stage
        )

    return app


class _StateTable(faust.Table):
    """A table of JSON values (node -> state dict) written by :class:`tailhound.streams.codec.StateCodec`: the same
    JSON as Faust's default "json" codec (changelogs of either read back alike), ~4x faster to write."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.value_serializer = codec.STATE_CODEC_NAME  # before the app makes its changelog topic and store


def _state_table(app: faust.App, name: str, partitions: int) -> faust.Table:
    """``app.Table(name, default=None, partitions=partitions)``, with the state codec for values."""
    codec.register()
    return app.tables.add(_StateTable(app, name=name, default=None, beacon=app.tables.beacon, partitions=partitions))


#: each app's intake counts (see intake_stats)
_STATS: weakref.WeakKeyDictionary[faust.App, IntakeStats] = weakref.WeakKeyDictionary()


#: each app's rule swap (see rule_swapper)
_SWAPPERS: weakref.WeakKeyDictionary[faust.App, Callable[[RuleSet], None]] = weakref.WeakKeyDictionary()


def rule_swapper(app: faust.App) -> Callable[[RuleSet], None]:
    """The function that makes the app judge the next snapshots with another rule set (hot reload)."""
    return _SWAPPERS[app]


def intake_stats(app: faust.App) -> IntakeStats:
    """What the app's telemetry agent let in and rejected, by reason (:class:`IntakeStats`; the worker exports
    it as Prometheus counters with :class:`tailhound.streams.intake_stats.StatsCollector`)."""
    return _STATS[app]


def tune_gc() -> None:
    """Garbage collection for a worker process. At CPython's defaults the worker ran ~350 young, ~30 middle
    and 2-3 full collections per 2,048 snapshots, the full ones ~70 ms each (they walk every object: the
    modules, Faust, the compiled rules, the state): 0.1-0.14 ms per snapshot, as much as the decode. What
    exists at start is frozen out of the collections (it lives as long as the process) and young
    collections run every GC_GEN0_THRESHOLD allocations instead of 700 (a young collection walks what
    survived since the last one: the rarer, the more of a snapshot's short-lived objects are gone by then;
    BENCHMARKS.md "Where a v3 snapshot's CPU goes" has the measurements). Garbage
    cycles (a few objects per snapshot) are still collected, only later; no result changes. What the first
    messages build (the fleet's state) is frozen too, once built (:mod:`tailhound.streams.gc_freeze`)."""
    gc_freeze.enable()
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def make_worker(app: faust.App, settings: Settings) -> faust.Worker:
    """The Faust worker that runs `app`, as ``tailhound worker`` runs it (and the benchmark measures it).

    Faust's terminal spinner is left out: to spin on every log record it sets the root logger to DEBUG,
    so every debug call of the Kafka client (about one per snapshot here) built a LogRecord and went
    through the handlers only to be dropped there; now the configured level drops it at the level check.
    The garbage collector is tuned for the worker (:func:`tune_gc`)."""
    # override_logging off: the process's handler (tailhound.logs.setup_logging) keeps its format and filters
    worker = faust.Worker(
        app, loglevel=settings.streams.log_level.upper(), quiet=True, redirect_stdouts=False, override_logging=False
    )
    worker.spinner = None
    tune_gc()
    return worker


def _store_url(settings: Settings) -> str:
    """Faust's ``store`` URL for ``streams.store`` (:mod:`tailhound.streams.table_store`: memory, or RocksDB under
    ``streams.data_dir``); a ConfigError when rocksdb is chosen but its binding is not installed."""
    from .table_store import store_url

    return store_url(settings.streams)
