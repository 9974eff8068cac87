"""The streams worker as ``tailhound worker`` runs it: the Faust app of :mod:`tailhound.streams.app` plus
the notifier as a task (:mod:`tailhound.notifier.service`) unless ``notifier.enabled`` is false.

This is the one place where streams and the notifier meet, so neither package imports the other.
"""

from __future__ import annotations

import asyncio

import faust

from tailhound.errors import ConfigError
from tailhound.notifier.service import NotifierService, build_receivers, notifier_config
from tailhound.settings import Settings
from tailhound.streams.app import create_app, make_worker
from tailhound.streams.ruleset import RuleSet


def add_notifier(app: faust.App, settings: Settings) -> None:
    """Run the notifier next to the agents; its config and receivers are checked now, so a bad routing
    file or a missing secret stops the worker at start with a message naming it."""
    config = notifier_config(settings)
    receivers = build_receivers(settings, config)

    @app.task
    async def notifier() -> None:
        await NotifierService(settings, config, receivers).run(asyncio.Event())


def create_worker_app(settings: Settings, rules: RuleSet) -> faust.App:
    """The worker's Faust app: the streams agents, and the notifier task when it is enabled."""
    prepare_data_dir(settings)
    app = create_app(settings, rules)
    if settings.notifier.enabled:
        add_notifier(app, settings)
    return app


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
