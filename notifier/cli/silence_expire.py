"""``tailhound silence expire``: end a silence now."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer

from tailhound.errors import TailhoundError

from ..state import Silence
from .common import ConfigOpt, broker_settings, console, silence_app, state_items, write_state


@silence_app.command("expire")
def silence_expire(
    silence_id: Annotated[str, typer.Argument(help="Silence id (sil-...).")], config: ConfigOpt = None
) -> None:
    """End a silence now."""
    settings = broker_settings(config)
    value = state_items(settings).get(f"silence:{silence_id}")
    if not value:
        raise TailhoundError(f"no silence {silence_id}")
    s = Silence.model_validate(value)
    if s.expired_at is None:
        s.expired_at = time.time()
        asyncio.run(write_state(settings, f"silence:{s.id}", s.model_dump(mode="json")))
    console.print(f"{s.id} expired")
