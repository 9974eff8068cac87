"""The agent under benchmark: `tailhound agent` with a fake 8-GPU NVML (no GPU on the bench machine).

    python -m bench.agent_process CONFIG DURATION_S

Everything else is the real agent: real collectors against the local endpoints the harness serves,
the real sender publishing to the bundled broker, the real /metrics server.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from agents.config import load_agent_config
from agents.main import run_agent
from tailhound.settings import load_settings
from tests.agents.fake_pynvml import FakeNvml


class _SetAttr:
    """The one monkeypatch method FakeNvml.install needs."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def main() -> None:
    config, duration = sys.argv[1], float(sys.argv[2])
    logging.basicConfig(level=logging.WARNING)
    FakeNvml.fleet().install(_SetAttr())  # no pytest import: it would inflate the measured RSS
    asyncio.run(run_agent(load_settings(), load_agent_config(config), duration_s=duration))


if __name__ == "__main__":
    main()
