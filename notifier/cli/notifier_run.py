"""``tailhound notifier run``: the notifier alone, without the streams worker."""

from __future__ import annotations

import asyncio

from tailhound.logs import log_start, setup_logging
from tailhound.output import LogFormatOpt, LogLevelOpt

from .common import ConfigOpt, broker_settings, notifier_app


@notifier_app.command("run")
def notifier_run(config: ConfigOpt = None, log_level: LogLevelOpt = None, log_format: LogFormatOpt = None) -> None:
    """Run the notifier alone (the streams worker also runs it unless notifier.enabled is false)."""
    from tailhound.kafka import ensure_topics

    from ..receiver_set import build_receivers, notifier_config
    from ..service import NotifierService

    settings = broker_settings(config)
    setup_logging(
        log_level, log_format, default_level=settings.streams.log_level, default_format=settings.streams.log_format
    )
    log_start("notifier", broker=settings.broker, api_listen=settings.notifier.api_listen or "off")
    cfg = notifier_config(settings)

    async def main() -> None:
        await ensure_topics(settings)
        service = NotifierService(settings, cfg, build_receivers(settings, cfg))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await service.run(stop)

    asyncio.run(main())
