"""A hostile rule file on hot reload (streams/reload.py, POST /-/reload): nesting 5,000 deep or aliases that
expand to 531,441 conditions are rejected with the reason in the answer, the log and the failure metric, and
the old rules keep running; whatever the checker raises is a rejected reload, never a dead reload watch;
the files are parsed on a thread while the event loop keeps serving."""

from __future__ import annotations

import asyncio
import logging
import threading

import aiohttp
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from tailhound.notifier.api import ApiAccess
from tailhound.streams import reload as reload_module
from tailhound.streams.reload import RuleReloader
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.worker import web as worker_web
from tests.deploy.test_observability import RULE
from tests.hostile.yaml_attacks import alias_rule_file, nested_flow


def reloader_on(tmp_path, applied: list) -> tuple[RuleReloader, CollectorRegistry]:
    (tmp_path / "t.yaml").write_text(RULE)
    reg = CollectorRegistry()
    return RuleReloader(tmp_path, load_rules(tmp_path), applied.append, registry=reg), reg


def test_a_rule_file_nested_5000_deep_is_a_rejected_reload(tmp_path, caplog):
    applied: list = []
    reloader, reg = reloader_on(tmp_path, applied)
    (tmp_path / "deep.yaml").write_text(f"groups: {nested_flow(5000)}\n")
    with caplog.at_level(logging.ERROR, logger="tailhound.streams.reload"):
        result = reloader.poll()
    assert result is not None and not result.ok and applied == []
    assert any("nested too deep" in p for p in result.problems)
    assert any("nested too deep" in r.getMessage() for r in caplog.records)
    assert reg.get_sample_value("tailhound_rules_reloads_total", {"result": "failure"}) == 1.0
    assert reloader.current.by_name("hot") is not None  # the old rules run on


def test_an_alias_bomb_is_a_rejected_reload(tmp_path):
    applied: list = []
    reloader, _ = reloader_on(tmp_path, applied)
    (tmp_path / "t.yaml").write_text(alias_rule_file())
    result = reloader.reload("test")
    assert not result.ok and applied == [] and any("too many nodes" in p for p in result.problems)


def test_whatever_the_checker_raises_is_a_rejected_reload(tmp_path, monkeypatch):
    applied: list = []
    reloader, reg = reloader_on(tmp_path, applied)

    def explode(_paths):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(reload_module, "check_paths", explode)
    result = reloader.reload("test")
    assert not result.ok and applied == [] and "maximum recursion depth" in result.problems[0]
    assert reg.get_sample_value("tailhound_rules_last_reload_successful") == 0.0


def test_the_files_are_parsed_off_the_event_loop(tmp_path, monkeypatch):
    applied: list = []
    reloader, _ = reloader_on(tmp_path, applied)
    checked = reload_module.check_paths
    loop_ran = threading.Event()

    def slow_check(paths):  # returns only once the loop has run: a check on the loop would wait in vain
        assert loop_ran.wait(timeout=10), "the event loop did not run while the rules were parsed"
        return checked(paths)

    monkeypatch.setattr(reload_module, "check_paths", slow_check)

    async def main():
        task = asyncio.create_task(reloader.reload_async("test"))
        await asyncio.sleep(0)
        loop_ran.set()
        return await task

    result = asyncio.run(main())
    assert result.ok and len(applied) == 1


def test_post_reload_answers_422_with_the_reason_and_keeps_the_rules(tmp_path):
    applied: list = []
    reloader, reg = reloader_on(tmp_path, applied)
    (tmp_path / "deep.yaml").write_text(f"groups: {nested_flow(5000)}\n")
    app = worker_web.make_app(reg, reloader, ApiAccess(token=b"secret-token"), lambda: (True, ""))

    async def main():
        async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
            url = str(server.make_url("/-/reload"))
            async with http.post(url, headers={"Authorization": "Bearer secret-token"}) as r:
                return r.status, await r.json()

    status, body = asyncio.run(main())
    assert status == 422 and body["ok"] is False and body["rules"] == 1
    assert any("nested too deep" in p for p in body["problems"])
    assert applied == [] and reloader.current.by_name("hot") is not None
