"""`tailhound silence add|list|expire`, `tailhound incidents list|show` and `tailhound notifier check`,
against the bundled broker."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.errors import TailhoundError
from tailhound.kafka import ensure_topics
from tailhound.notifier.state_topic import read_state

from .factories import incident_event
from .test_service import publish

runner = CliRunner()


@pytest.fixture
def env(settings, monkeypatch):
    monkeypatch.setenv("TAILHOUND_BROKER", settings.broker)
    monkeypatch.setenv("TAILHOUND_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("COLUMNS", "250")
    asyncio.run(ensure_topics(settings))
    return settings


def cli(*args: str):
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result


@pytest.mark.broker
def test_silence_add_list_expire(env):
    out = cli(
        "silence",
        "add",
        "-m",
        'node="gpu-node-7"',
        "-m",
        'root_cause=~"gpu-.*"',
        "--author",
        "ana",
        "--comment",
        "CHG-1234 rack maintenance",
        "--duration",
        "2h",
    )
    assert out.exit_code == 0, out.output
    sid = re.search(r"(sil-[0-9a-f]+)", out.output).group(1)
    items, _ = asyncio.run(read_state(env))
    stored = items[f"silence:{sid}"]
    assert stored["author"] == "ana" and stored["matchers"] == ['node="gpu-node-7"', 'root_cause=~"gpu-.*"']
    assert 7190 <= stored["ends_at"] - stored["starts_at"] <= 7210
    listed = cli("silence", "list").output
    assert sid in listed and "active" in listed and "CHG-1234" in listed
    assert cli("silence", "expire", sid).exit_code == 0
    assert sid not in cli("silence", "list").output
    assert "expired" in cli("silence", "list", "--all").output
    assert [r["id"] for r in json.loads(cli("silence", "list", "--all", "-o", "json").output)] == [sid]


@pytest.mark.broker
def test_silence_add_rejects_bad_input(env):
    from tailhound.errors import TailhoundError

    with pytest.raises(TailhoundError, match="invalid matcher"):
        cli("silence", "add", "-m", "node~x", "--author", "a", "--comment", "c")
    with pytest.raises(TailhoundError, match="time zone"):
        cli("silence", "add", "-m", 'node="x"', "--author", "a", "--comment", "c", "--until", "2030-01-01T00:00:00")
    with pytest.raises(TailhoundError, match="no silence"):
        cli("silence", "expire", "sil-000000000000")


@pytest.mark.broker
def test_incidents_list_and_show(env):
    asyncio.run(
        publish(
            env,
            incident_event(incident_id="inc-cli-1"),
            incident_event(incident_id="inc-cli-2", node="gpu-node-5"),
            incident_event(incident_id="inc-cli-2", event="resolved", sequence=2, node="gpu-node-5"),
        )
    )
    listed = cli("incidents", "list").output
    assert "inc-cli-1" in listed and "inc-cli-2" not in listed
    assert "inc-cli-2" in cli("incidents", "list", "--all").output
    as_json = json.loads(cli("incidents", "list", "--all", "-o", "json").output)
    assert {r["incident_id"]: r["state"] for r in as_json} == {"inc-cli-1": "open", "inc-cli-2": "resolved"}
    shown = cli("incidents", "show", "inc-cli-2")
    assert shown.exit_code == 0
    assert "#1 opened" in shown.output and "#2 resolved" in shown.output and "gpu-node-5" in shown.output


@pytest.mark.broker
def test_incidents_show_lists_a_finished_groups_notification_history(env):
    from tailhound.kafka import make_producer
    from tailhound.notifier.state import DeliveryLog, DeliveryRecord, GroupState

    ev = incident_event(incident_id="inc-cli-3", event="resolved", sequence=2, node="gpu-node-6")
    log = DeliveryLog(
        receiver="oncall",
        sequence=2,
        delivered=2,
        history=[
            DeliveryRecord(
                sequence=1, kind="opened", created_at=ev.opened_at, at=ev.opened_at + 1, outcome="delivered"
            ),
            DeliveryRecord(
                sequence=2,
                kind="resolved",
                created_at=ev.ts,
                at=ev.ts + 40,
                outcome="gave-up",
                attempts=5,
                error="HTTP 503",
            ),
        ],
    )
    grp = GroupState(
        group_id="inc-cli-3",
        group_key="k",
        incidents={"inc-cli-3": ev},
        created_at=ev.opened_at,
        status="resolved",
        status_since=ev.ts,
        logs={"oncall": log},
    )

    async def write() -> None:
        await publish(env, incident_event(incident_id="inc-cli-3", node="gpu-node-6"), ev)
        producer = make_producer(env)
        await producer.start()
        try:  # a group the notifier is done with, kept for the console (notifier/history.py)
            await producer.send_and_wait(
                env.notifier_state_topic, key=b"recent:inc-cli-3", value=grp.model_dump_json().encode()
            )
        finally:
            await producer.stop()

    asyncio.run(write())
    shown = cli("incidents", "show", "inc-cli-3").output
    assert "notification group inc-cli-3" in shown
    assert re.search(r"#1 opened .* delivered", shown), shown
    assert re.search(r"#2 resolved .* gave-up .*attempts 5 \(HTTP 503\)", shown), shown


def test_notifier_check_names_file_and_line(tmp_path):
    good = tmp_path / "ok.yaml"
    good.write_text("route: {receiver: c}\nreceivers: [{type: console, name: c}]\n")
    assert "OK (1 receivers" in cli("notifier", "check", str(good)).output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "route:\n  receiver: c\n  routes:\n    - matchers: ['sev~x']\nreceivers: [{type: console, name: c}]\n"
    )
    out = cli("notifier", "check", str(bad))  # every problem, at line and column (tests/notifier/test_config_check.py)
    assert out.exit_code == 1
    assert out.stdout.startswith(f"{bad}:4:18: route.routes[0].matchers[0]: invalid matcher 'sev~x'")


def test_silence_add_refuses_what_the_limits_refuse_before_touching_the_broker(monkeypatch):
    monkeypatch.setenv("TAILHOUND_BROKER", "kafka://127.0.0.1:9")  # never reached
    for args, says in [
        (["-m", 'node=~"(a)\\\\1"'], "invalid regular expression in matcher node=~"),
        (["-m", 'node="a"', "--duration", "31d"], "at most 30 days"),
        (["-m", 'node="a"', "--comment", "x" * 2000], "comment has 2000 bytes"),
    ]:
        out = runner.invoke(app, ["silence", "add", "--author", "ana", "--comment", "c", *args])
        assert isinstance(out.exception, TailhoundError) and says in str(out.exception), out.exception
