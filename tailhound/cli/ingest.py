"""``tailhound ingest``: take the samples a Prometheus already has (docs/prometheus.md).

``tailhound ingest -c ingest.yaml``: run the remote-write receiver and/or the federation pull, publishing
snapshots to the telemetry topic (TAILHOUND_BROKER) until SIGINT/SIGTERM; SIGHUP reloads ingest.yaml.
``tailhound ingest -c ingest.yaml --check``: check the file (and read the token files) and say what would run.
``tailhound ingest --prometheus-config [--url URL]``: print the ``remote_write`` block for prometheus.yml, whose
``write_relabel_configs`` keep only the series tailhound reads (derived from the signal catalog).
:func:`register` adds the command to an app (``tailhound/cli/__init__.py`` does).

The standalone ingest tunes its garbage collector as a worker does (:func:`tune_gc`): what exists at start is
frozen and young collections run every ``GC_GEN0_THRESHOLD`` allocations; what is alive after its warm-up is
frozen too (:func:`freeze_long_lived`): its caches of labels and series live as long as the process, and
Python's collector would walk them at every full collection (BENCHMARKS.md, "Prometheus ingest"). Inside a
worker the worker decides.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tailhound.errors import TailhoundError
from tailhound.logs import log_start, setup_logging
from tailhound.output import LogFormatOpt, LogLevelOpt, make_console
from tailhound.settings import Settings

if TYPE_CHECKING:  # loaded by the command itself (the CLI starts fast)
    from tailhound.ingest.config import IngestServiceConfig

console = make_console()
#: Seconds after start when the caches hold every target's series (a few scrape intervals and settles).
FREEZE_AFTER_S = 120.0


def tune_gc() -> None:
    """Freeze what exists at start (modules, config) and raise the young-generation threshold to the worker's."""
    from tailhound.streams.gc_freeze import GC_GEN0_THRESHOLD  # light: not the Faust app

    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def freeze_long_lived() -> None:
    """Collect, then move every object alive now out of the collector's generations (``gc.freeze``)."""
    gc.collect()
    gc.freeze()


def register(app: typer.Typer, settings_of: Callable[[], Settings]) -> None:
    @app.command()
    def ingest(
        config: Annotated[
            Path | None,
            typer.Option("--config", "-c", help="ingest.yaml: listen, grouping, auth, federation, publish."),
        ] = None,
        check: Annotated[bool, typer.Option("--check", help="Check the file and say what would run.")] = False,
        prometheus_config: Annotated[
            bool, typer.Option("--prometheus-config", help="Print the remote_write block for prometheus.yml and exit.")
        ] = False,
        url: Annotated[
            str, typer.Option(help="With --prometheus-config: the URL Prometheus reaches tailhound at.")
        ] = "http://tailhound-ingest:9097/api/v1/write",
        duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
        log_level: LogLevelOpt = None,
        log_format: LogFormatOpt = None,
    ) -> None:
        """Take samples from Prometheus (remote write, federation) and publish them as snapshots."""
        from tailhound.ingest.config import IngestServiceConfig, load_ingest_config
        from tailhound.ingest.prometheus_snippet import remote_write_snippet

        cfg = load_ingest_config(config) if config is not None else None
        if prometheus_config:
            sys.stdout.write(remote_write_snippet(url, cfg or IngestServiceConfig()))
            return
        if cfg is None:
            raise TailhoundError("tailhound ingest needs --config ingest.yaml (docs/prometheus.md has one)")
        receiver = cfg.receiver_config()  # reads the token files: a missing one is an error now
        if check:
            console.print(describe(cfg, len(receiver.bearer_tokens) + len(receiver.basic_auth)), highlight=False)
            return
        setup_logging(log_level, log_format)
        settings = settings_of()
        log_start("ingest", listen=cfg.listen or "off", broker=settings.broker or None)
        if not settings.broker:
            raise TailhoundError(
                "tailhound ingest publishes to a running broker: set TAILHOUND_BROKER=kafka://host:9092"
            )
        asyncio.run(run(settings, cfg, duration, config))


def describe(cfg: IngestServiceConfig, credentials: int) -> str:
    lines = []
    if cfg.listen:
        lines.append(
            f"remote write: POST http://{cfg.listen}{cfg.path} "
            f"({f'{credentials} credential(s)' if credentials else 'no authentication'})"
        )
        g = cfg.remote_write.grouping
        lines.append(
            f"  node from {', '.join(g.node_labels)}; source from {g.source_label}"
            + (f" (mapped: {', '.join(f'{k}->{v}' for k, v in g.sources.items())})" if g.sources else "")
            + f"; a scrape is complete {g.settle_s:g} s after its last sample"
        )
        if cfg.ha is not None:
            lines.append(
                f"  HA pairs: one replica per {cfg.ha.cluster_label} (label {cfg.ha.replica_label}), "
                f"fail-over after {cfg.ha.failover_s:g} s"
            )
    if cfg.federation is not None:
        lines.append(f"federation: GET {cfg.federation.url}/federate every {cfg.federation.interval_s:g} s")
    return "ok: " + "\n".join(lines)


async def run(settings: Settings, cfg: IngestServiceConfig, duration: float | None, path: Path | None = None) -> None:
    """Serve until SIGINT/SIGTERM (or `duration`); SIGHUP reloads `path` (the ingest.yaml `cfg` came from)."""
    from tailhound.config_reload import ConfigReloader
    from tailhound.ingest.config import load_ingest_config
    from tailhound.ingest.service import IngestService, stop_on_signals

    stop = asyncio.Event()
    stop_on_signals(stop)
    loop = asyncio.get_running_loop()
    service = IngestService(settings, cfg)
    tune_gc()  # after the service is built: its config and catalog live as long as the process
    # (the timers after it: its full collection must not eat into `duration` and end the run before the freeze)
    if duration is not None:
        loop.call_later(duration, stop.set)
    loop.call_later(FREEZE_AFTER_S, freeze_long_lived)
    if path is not None:
        ConfigReloader(
            path,
            load_ingest_config,
            service.reconfigure,
            prefix="tailhound_ingest",
            registry=service.metrics.registry,
            what="ingest config",
        ).on_sighup()
    await service.run(stop)
