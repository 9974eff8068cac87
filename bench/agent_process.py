"""The agent under benchmark: `tailhound agent` with a fake 8-GPU NVML (no GPU on the bench machine).

    python -m bench.agent_process CONFIG DURATION_S [PROFILE_OUT [WARMUP_S]]

Everything else is the real agent: real collectors against the local endpoints the harness serves,
the real sender publishing to the bundled broker, the real /metrics server.

With PROFILE_OUT, yappi (CPU clock, every thread) profiles from WARMUP_S (default 8) to the end and
writes pstats there (``python -m pstats PROFILE_OUT``); yappi's per-call overhead inflates small
functions, so read it for where time goes, not for totals. The benchmark itself never profiles.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

from tailhound.agents.config import load_agent_config
from tailhound.agents.main import run_agent
from tailhound.settings import load_settings
from tests.agents.fake_pynvml import FakeNvml


class _SetAttr:
    """The one monkeypatch method FakeNvml.install needs."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def _profile(out: str, warmup_s: float):
    import yappi  # only when asked: it is not in the measured process otherwise

    yappi.set_clock_type("cpu")

    def start() -> None:
        time.sleep(warmup_s)
        yappi.start(builtins=True)

    threading.Thread(target=start, daemon=True).start()

    def stop() -> None:
        yappi.stop()
        yappi.get_func_stats().save(out, type="pstat")

    return stop


def main() -> None:
    config, duration = sys.argv[1], float(sys.argv[2])
    logging.basicConfig(level=logging.WARNING)
    FakeNvml.fleet().install(_SetAttr())  # no pytest import: it would inflate the measured RSS
    stop = _profile(sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 8.0) if len(sys.argv) > 3 else None
    try:
        asyncio.run(run_agent(load_settings(), load_agent_config(config), duration_s=duration))
    finally:
        if stop is not None:
            stop()


if __name__ == "__main__":
    main()
