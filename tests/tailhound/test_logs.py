"""tailhound/logs.py: one log format (logfmt or JSON) for every process, the start line, repeats folded."""

from __future__ import annotations

import io
import json
import logging

import pytest

from tailhound.errors import TailhoundError
from tailhound.logs import JsonFormatter, LogfmtFormatter, RepeatFilter, log_start, resolve, setup_logging


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def _record(
    name: str = "tailhound.agent",
    msg: str = "hello %s",
    args: tuple = ("world",),
    level: int = logging.INFO,
    **extra: object,
) -> logging.LogRecord:
    rec = logging.getLogger(name).makeRecord(name, level, __file__, 1, msg, args, None, extra=extra or None)
    rec.created = 1796160000.25
    return rec


def test_logfmt_lines_quote_what_needs_quoting_and_carry_the_extra_fields():
    line = LogfmtFormatter().format(_record(listen="127.0.0.1:9464", note='say "hi"', n=3))
    assert line == (
        'ts=2026-12-01T21:20:00.250Z level=info logger=tailhound.agent msg="hello world" '
        'listen=127.0.0.1:9464 note="say \\"hi\\"" n=3'
    )


def test_json_lines_are_one_object_with_the_same_fields():
    try:
        raise ValueError("boom")
    except ValueError:
        rec = _record(level=logging.ERROR, listen="0.0.0.0:9097")
        import sys

        rec.exc_info = sys.exc_info()
    out = json.loads(JsonFormatter().format(rec))
    assert out["ts"] == "2026-12-01T21:20:00.250Z" and out["level"] == "error" and out["msg"] == "hello world"
    assert out["listen"] == "0.0.0.0:9097" and "ValueError: boom" in out["exc"]


def test_a_reconnect_storm_is_one_line_then_one_summary_per_window():
    """238 lines a second while the broker is down (aiokafka) become the first one, then one per window
    that says how many were dropped; other loggers and other messages pass untouched."""
    now = [0.0]
    f = RepeatFilter(window_s=10.0, clock=lambda: now[0])
    passed = []
    for i in range(238 * 12):  # 12 s of the storm, at 238 a second
        now[0] = i / 238
        rec = _record("aiokafka.conn", "Unable connect to node with id %s: %s", (1, "refused"), level=logging.ERROR)
        if f.filter(rec):
            passed.append(rec)
    assert len(passed) == 2
    assert passed[1].suppressed == 2379
    assert "(2379 similar messages suppressed in the last 10 s)" in passed[1].getMessage()
    assert f.filter(_record("aiokafka.conn", "another message %s", (1,), level=logging.ERROR))
    assert all(f.filter(_record("faust.transport", "Creating topic %r", (f"t{i}",))) for i in range(5))  # info
    assert all(f.filter(_record("tailhound.agent")) for _ in range(5))


def test_the_kinds_the_filter_remembers_are_bounded():
    f = RepeatFilter(clock=lambda: 0.0, max_kinds=10)
    for i in range(100):
        f.filter(_record("aiokafka", f"message {i}", (), level=logging.WARNING))
    assert 0 < len(f._seen) <= 10


def test_level_and_format_from_the_command_line_then_the_environment_then_the_defaults(monkeypatch):
    monkeypatch.delenv("TAILHOUND_LOG_LEVEL", raising=False)
    monkeypatch.delenv("TAILHOUND_LOG_FORMAT", raising=False)
    assert resolve() == ("info", "logfmt")
    assert resolve(default_level="warning", default_format="json") == ("warning", "json")
    monkeypatch.setenv("TAILHOUND_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("TAILHOUND_LOG_FORMAT", "json")
    assert resolve(default_level="warning") == ("debug", "json")
    assert resolve("warn", "logfmt") == ("warning", "logfmt")
    with pytest.raises(ValueError, match="use one of logfmt, json"):
        resolve(fmt="text")


def test_setup_replaces_the_handlers_and_the_start_line_is_written_at_any_level(restore_root, monkeypatch):
    monkeypatch.delenv("TAILHOUND_LOG_LEVEL", raising=False)
    logging.basicConfig(stream=io.StringIO())  # what a library or an earlier call left behind
    out = io.StringIO()
    setup_logging("warning", "json", stream=out)
    setup_logging("warning", "json", stream=out)  # twice: still one handler
    kinds = [type(h).__name__ for h in logging.getLogger().handlers]
    assert kinds.count("_TailhoundHandler") == 1 and "StreamHandler" not in kinds  # pytest's own stay
    logging.getLogger("tailhound.worker.compose").info("not at warning")
    log_start("worker", web_listen="127.0.0.1:9096", broker=None)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 1
    assert lines[0]["msg"] == "tailhound worker starting" and lines[0]["web_listen"] == "127.0.0.1:9096"
    assert "version" in lines[0] and "broker" not in lines[0]
    with pytest.raises(TailhoundError, match="log level 'loud'"):
        setup_logging("loud")
