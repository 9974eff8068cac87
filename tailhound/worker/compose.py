"""The streams worker as ``tailhound worker`` runs it: the Faust app of :mod:`tailhound.streams.app` plus
the notifier as a task (:mod:`tailhound.notifier.service`) unless ``notifier.enabled`` is false, and the
Prometheus ingest (:mod:`tailhound.ingest.service`) when ``ingest.config`` names an ingest.yaml.

This is the one place where streams and the notifier meet, so neither package imports the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import weakref

import faust
from prometheus_client import CollectorRegistry

from tailhound.capacity_file import CAPACITY_SIGNALS
from tailhound.errors import ConfigError
from tailhound.notifier.api import ApiAccess
from tailhound.notifier.receiver_set import build_receivers, notifier_config
from tailhound.notifier.service import NotifierService
from tailhound.settings import Settings
from tailhound.streams.app import create_app, intake_stats, make_worker, rule_swapper
from tailhound.streams.coverage_watch import WINDOW_S, CoverageWatch
from tailhound.streams.intake_stats import StatsCollector
from tailhound.streams.reload import RuleReloader
from tailhound.streams.ruleset.rulefile import RuleSet
from tailhound.worker import web as worker_web
from tailhound.worker.guard import (
    bound_commit_retries,
    guard_topics,
    reset_offsets_past_log_end,
    retry_unknown_produce_errors,
    stop_within,
)
from tailhound.worker.lost_logs import drop_commits_into_lost_logs, skip_recovery_of_lost_changelogs
from tailhound.worker.metrics import ConsumerLagCollector, readiness

log = logging.getLogger(__name__)
#: each worker app's own Prometheus metrics (see metrics_registry)
_REGISTRIES: weakref.WeakKeyDictionary[faust.App, CollectorRegistry] = weakref.WeakKeyDictionary()
_RELOADERS: weakref.WeakKeyDictionary[faust.App, RuleReloader] = weakref.WeakKeyDictionary()
_WEB_PORTS: weakref.WeakKeyDictionary[faust.App, int | None] = weakref.WeakKeyDictionary()
_ENDPOINT_TASKS: weakref.WeakKeyDictionary[faust.App, asyncio.Future] = weakref.WeakKeyDictionary()


def add_notifier(app: faust.App, settings: Settings) -> None:
    """Run the notifier next to the agents; its config and receivers are checked now, so a bad routing file
    or a webhook host off the allow-list stops the worker at start with a message naming it (a receiver whose
    secret is missing is disabled with a warning, see :func:`tailhound.notifier.receiver_set.build_receivers`)."""
    config = notifier_config(settings)
    receivers = build_receivers(settings, config)

    @app.task
    async def notifier() -> None:
        registry = _REGISTRIES.get(app)  # its metrics on the worker's /metrics
        await NotifierService(settings, config, receivers, registry=registry).run(asyncio.Event())


def add_ingest(app: faust.App, settings: Settings) -> None:
    """Take Prometheus' samples in this worker (``ingest.config``): remote write and/or federation, published
    to the telemetry topic like the agents' snapshots (:mod:`tailhound.ingest.service`). The file is checked
    now, so a bad one stops the worker at start with a message naming the line."""
    from tailhound.ingest.config import load_ingest_config
    from tailhound.ingest.service import IngestService

    assert settings.ingest.config is not None
    config = load_ingest_config(settings.ingest.config)
    config.receiver_config()  # the token files are readable

    @app.task
    async def ingest() -> None:
        await IngestService(settings, config).run(asyncio.Event())


def create_worker_app(settings: Settings, rules: RuleSet) -> faust.App:
    """The worker's Faust app: the streams agents, and the notifier task when it is enabled. Rule coverage
    (:mod:`tailhound.streams.coverage_watch`) watches the telemetry: rules that cannot fire with what the
    fleet sends are logged after WINDOW_S of telemetry, and exported in :func:`metrics_registry`."""
    prepare_data_dir(settings)
    # the capacity file's signals are there when the worker has one (else the rules reading them are blind)
    watch = CoverageWatch(rules, configured=CAPACITY_SIGNALS if settings.streams.capacity_file else ())
    app = create_app(settings, rules, on_snapshot=watch.observe, registry=watch.registry)
    watch.registry.register(ConsumerLagCollector(app, settings.telemetry_topic))
    _REGISTRIES[app] = watch.registry
    watch.registry.register(StatsCollector(intake_stats(app)))  # tailhound_telemetry_rejected{reason} ...
    log.info(
        "rule coverage: rules that cannot fire with the telemetry received are reported after %.0f s of it "
        "(`tailhound doctor` checks a recording or live targets now)",
        WINDOW_S,
    )
    add_rule_reload(app, settings, rules, watch)
    if settings.notifier.enabled:
        add_notifier(app, settings)
    if settings.ingest.config is not None:
        add_ingest(app, settings)
    return app


def add_rule_reload(app: faust.App, settings: Settings, rules: RuleSet, watch: CoverageWatch) -> RuleReloader:
    """Hot reload of the rule pack (:mod:`tailhound.streams.reload`): SIGHUP and the file watch every
    ``streams.rules_watch_s`` (a task: after table recovery), and ``POST /-/reload`` on the worker endpoint
    (:func:`run_endpoint`, which also serves ``/metrics`` and the probes)."""
    swap = rule_swapper(app)

    def apply(new: RuleSet) -> None:
        swap(new)
        watch.rules = new

    reloader = _RELOADERS[app] = RuleReloader(settings.rules_dir, rules, apply, registry=watch.registry)

    @app.task
    async def rule_reload() -> None:
        loop = asyncio.get_running_loop()
        pending: set[asyncio.Task] = set()  # a task the loop only references weakly must be held somewhere

        def on_sighup() -> None:
            task = loop.create_task(reloader.reload_async("SIGHUP"))
            pending.add(task)
            task.add_done_callback(pending.discard)

        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
            loop.add_signal_handler(signal.SIGHUP, on_sighup)
        while settings.streams.rules_watch_s > 0:
            await asyncio.sleep(settings.streams.rules_watch_s)
            await reloader.poll_async()

    return reloader


async def run_endpoint(app: faust.App, settings: Settings) -> None:
    """The worker endpoint (:mod:`tailhound.worker.web`) until cancelled. It starts with the process, before
    table recovery (Faust starts tasks and services only after it), so probes and Prometheus see a
    recovering worker as "not ready" rather than down."""
    if not settings.streams.web_listen:
        return
    access = ApiAccess.from_settings(settings.notifier)
    try:
        runner, port = await worker_web.serve(
            settings.streams.web_listen, _REGISTRIES[app], _RELOADERS[app], access, lambda: readiness(app)
        )
    except OSError as exc:  # telemetry matters more than the endpoint: say so and go on without it
        log.error(
            "worker endpoint: cannot listen on %s (%s): no /metrics, probes or POST /-/reload; set "
            "TAILHOUND_STREAMS__WEB_LISTEN to a free port (or 127.0.0.1:0)",
            settings.streams.web_listen,
            exc.strerror or exc,
        )
        return
    _WEB_PORTS[app] = port
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def rule_reloader(app: faust.App) -> RuleReloader:
    return _RELOADERS[app]


def web_port(app: faust.App) -> int | None:
    """The port the worker endpoint bound (None until it started, or when it is off)."""
    return _WEB_PORTS.get(app)


def metrics_registry(app: faust.App) -> CollectorRegistry:
    """The worker app's own Prometheus metrics (``tailhound_rule_blind{rule,severity}``,
    ``tailhound_telemetry_rejected_total{reason}`` ...), for a metrics endpoint to serve."""
    return _REGISTRIES[app]


def prepare_data_dir(settings: Settings) -> None:
    """Create the worker's data directory with its parents (Faust creates only the last level)."""
    path = settings.streams.effective_data_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"streams.data_dir {path}: cannot create it: {exc.strerror} "
            "(set TAILHOUND_STREAMS__DATA_DIR to a writable directory)"
        ) from exc
    if settings.streams.data_dir is None:
        log.info("streams data dir: %s (temporary, removed at exit; set streams.data_dir to keep one)", path)


def run_worker(settings: Settings, rules: RuleSet) -> None:
    """Run a Faust worker until SIGINT/SIGTERM (stopped within SHUTDOWN_GRACE_S of it); it declares its topics
    again if the broker loses them and exits non-zero when commits keep failing (:mod:`tailhound.worker.guard`).
    Does not return (raises SystemExit)."""
    bound_commit_retries()
    drop_commits_into_lost_logs()
    skip_recovery_of_lost_changelogs()
    reset_offsets_past_log_end()
    retry_unknown_produce_errors()
    with contextlib.suppress(ValueError, AttributeError):  # SIGHUP reloads the rules (a task installs it)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    app = create_worker_app(settings, rules)
    app.conf.topic_replication_factor = settings.replication_factor  # the table changelogs Faust declares
    guard_topics(app, settings)
    worker = make_worker(app, settings)
    stop_within(worker)
    # before table recovery; the loop keeps only a weak reference to a task, and one whose only await is on an
    # Event nothing else holds is garbage: kept here, or a garbage collection cancels the endpoint (it did)
    endpoint = asyncio.ensure_future(run_endpoint(app, settings), loop=worker.loop)
    _ENDPOINT_TASKS[app] = endpoint
    worker.execute_from_commandline()
