"""The streams worker as ``tailhound worker`` runs it: the Faust app of :mod:`tailhound.streams.app` plus
the notifier as a task (:mod:`tailhound.notifier.service`) unless ``notifier.enabled`` is false.

This is the one place where streams and the notifier meet, so neither package imports the other.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

import faust
from prometheus_client import CollectorRegistry

from tailhound.errors import ConfigError
from tailhound.notifier.service import NotifierService, build_receivers, notifier_config
from tailhound.settings import Settings
from tailhound.streams.app import create_app, make_worker
from tailhound.streams.coverage_watch import WINDOW_S, CoverageWatch
from tailhound.streams.ruleset import RuleSet

log = logging.getLogger(__name__)
#: each worker app's own Prometheus metrics (see metrics_registry)
_REGISTRIES: weakref.WeakKeyDictionary[faust.App, CollectorRegistry] = weakref.WeakKeyDictionary()


def add_notifier(app: faust.App, settings: Settings) -> None:
    """Run the notifier next to the agents; its config and receivers are checked now, so a bad routing
    file or a missing secret stops the worker at start with a message naming it."""
    config = notifier_config(settings)
    receivers = build_receivers(settings, config)

    @app.task
    async def notifier() -> None:
        await NotifierService(settings, config, receivers).run(asyncio.Event())


def create_worker_app(settings: Settings, rules: RuleSet) -> faust.App:
    """The worker's Faust app: the streams agents, and the notifier task when it is enabled. Rule coverage
    (:mod:`tailhound.streams.coverage_watch`) watches the telemetry: rules that cannot fire with what the
    fleet sends are logged after WINDOW_S of telemetry, and exported in :func:`metrics_registry`."""
    prepare_data_dir(settings)
    watch = CoverageWatch(rules)
    app = create_app(settings, rules, on_snapshot=watch.observe)
    _REGISTRIES[app] = watch.registry
    log.info("rule coverage: rules that cannot fire with the telemetry received are reported after %.0f s of it "
             "(`tailhound doctor` checks a recording or live targets now)", WINDOW_S)
    if settings.notifier.enabled:
        add_notifier(app, settings)
    return app


def metrics_registry(app: faust.App) -> CollectorRegistry:
    """The worker app's own Prometheus metrics (``tailhound_rule_blind{rule,severity}`` ...), for a metrics
    endpoint to serve."""
    return _REGISTRIES[app]


def prepare_data_dir(settings: Settings) -> None:
    """Create the worker's data directory with its parents (Faust creates only the last level)."""
    path = settings.streams.data_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"streams.data_dir {path}: cannot create it: {exc.strerror} "
                          "(set TAILHOUND_STREAMS__DATA_DIR to a writable directory)") from exc


def run_worker(settings: Settings, rules: RuleSet) -> None:
    """Run a Faust worker until SIGINT/SIGTERM. Does not return (raises SystemExit)."""
    make_worker(create_worker_app(settings, rules), settings).execute_from_commandline()
