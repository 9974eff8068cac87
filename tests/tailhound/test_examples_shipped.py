"""Every bundled example (`tailhound example NAME`) loads as shipped, with none of the variables it reads set."""

from __future__ import annotations

import os
import re

import pytest

from tailhound.resources import EXAMPLES, example_path


@pytest.fixture
def bare_env(monkeypatch):
    """None of the variables the examples read (they all have defaults, or are secrets read later)."""
    for name in EXAMPLES:
        for var in re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", example_path(name).read_text(encoding="utf-8")):
            monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("TAILHOUND_")]:
        monkeypatch.delenv(var)


def test_every_example_loads_as_shipped(bare_env):
    from tailhound.agents.config import load_agent_config
    from tailhound.ingest.config import load_ingest_config
    from tailhound.notifier.config import load_config

    loaders = {
        "agent": load_agent_config,
        "ingest": lambda p: load_ingest_config(p).receiver_config(),
        "notifier": load_config,
        "notifier-production": load_config,
    }
    assert set(loaders) == set(EXAMPLES), "a new example needs its loader here"
    for name, load in loaders.items():
        assert load(example_path(name)) is not None, name


def test_the_ingest_example_listens_on_loopback_only(bare_env):
    from tailhound.ingest.config import load_ingest_config

    cfg = load_ingest_config(example_path("ingest"))
    assert cfg.listen == "127.0.0.1:9097" and cfg.federation is None and cfg.publish.buffer.spill_file is None
