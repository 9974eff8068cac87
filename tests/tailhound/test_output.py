"""Command output: piped output is never cut at 80 columns, listings take -o table|wide|json|yaml, -h everywhere."""

from __future__ import annotations

import io
import json

import pytest
import typer
import yaml
from rich.console import Console
from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.console import render_incident
from tailhound.errors import TailhoundError
from tailhound.notifier.cli.incidents_list import incident_listing_of
from tailhound.notifier.cli.silence_list import silence_listing_of
from tailhound.notifier.matchers import Matcher
from tailhound.notifier.state import Silence
from tailhound.output import PIPE_WIDTH, Listing, make_console, print_listing
from tests.notifier.factories import T0, incident_event

LONG_ID = "inc-" + "0123456789abcdef" * 8  # 132 characters: wider than rich's default 80 columns


def _piped() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return make_console(file=buf), buf


def test_a_piped_console_is_not_80_columns_and_keeps_long_cells_on_one_line():
    console, buf = _piped()
    assert not console.is_terminal and console.width == PIPE_WIDTH
    listing = Listing(["incident", "scope"])
    listing.add([LONG_ID, "node gpu-node-2, gpus 3, 5"])
    print_listing(listing, "table", console)
    assert any(LONG_ID in line for line in buf.getvalue().splitlines())
    rich_default = Console(file=io.StringIO())  # rich's own width off a terminal: what cut the output
    assert rich_default.width == 80


def test_an_incident_panel_piped_keeps_ids_whole_and_is_not_padded_to_the_pipe_width():
    console, buf = _piped()
    ev = incident_event(incident_id=LONG_ID, summary="GPU thermal throttling on gpu-node-2 " + "x" * 120)
    console.print(render_incident(ev))
    lines = buf.getvalue().splitlines()
    assert any(LONG_ID in line for line in lines)
    assert any(ev.summary in line for line in lines)
    assert max(map(len, lines)) < 400


def _incidents():
    return [
        incident_event(incident_id=LONG_ID, ts=T0 + 60, sequence=2, event="updated"),
        incident_event(incident_id="inc-2", node="gpu-node-5", event="resolved", sequence=3, ts=T0 + 120),
    ]


def test_incidents_listing_as_json_yaml_and_wide(capsys):
    console, buf = _piped()
    print_listing(incident_listing_of(_incidents()), "json", console)
    rows = json.loads(capsys.readouterr().out)
    assert [r["incident_id"] for r in rows] == [LONG_ID] and rows[0]["state"] == "open"
    assert rows[0]["sequence"] == 2 and rows[0]["scope"]["node"] == "gpu-node-3"
    print_listing(incident_listing_of(_incidents(), all_=True), "yaml", console)
    assert {r["incident_id"] for r in yaml.safe_load(capsys.readouterr().out)} == {LONG_ID, "inc-2"}
    print_listing(incident_listing_of(_incidents()), "wide", console)
    wide = buf.getvalue()
    assert "last event" in wide and "rule" in wide and _incidents()[0].rule in wide
    print_listing(incident_listing_of([]), "yaml", console)
    assert yaml.safe_load(capsys.readouterr().out) == []


def test_silence_listing_as_json_and_wide(capsys):
    s = Silence(
        matchers=[Matcher.parse('node="gpu-node-7"')],
        starts_at=T0,
        ends_at=T0 + 3600,
        author="ana",
        comment="CHG-1",
        created_at=T0,
    )
    console, buf = _piped()
    print_listing(silence_listing_of([s], now=T0 + 10), "json", console)
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["id"] == s.id and rows[0]["state"] == "active" and rows[0]["author"] == "ana"
    print_listing(silence_listing_of([s], now=T0 + 10), "wide", console)
    assert "created" in buf.getvalue()
    assert silence_listing_of([s], now=T0 + 7200).records == []


def test_an_unknown_output_format_names_the_choices():
    with pytest.raises(TailhoundError, match="table, wide, json, yaml"):
        print_listing(Listing(["a"]), "csv", make_console(file=io.StringIO()))


def _commands(cmd, path: tuple[str, ...] = ()):  # typer's (vendored) click command
    yield path
    if isinstance(getattr(cmd, "commands", None), dict):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


def test_every_command_takes_h_as_help():
    runner = CliRunner()
    paths = list(_commands(typer.main.get_command(app)))
    assert ("incidents", "list") in paths and ("notifier", "routes", "test") in paths and len(paths) > 25
    for path in paths:
        result = runner.invoke(app, [*path, "-h"], catch_exceptions=False)
        assert result.exit_code == 0 and "Usage" in result.output, (path, result.output)


def test_the_long_running_commands_take_log_level_and_log_format():
    runner = CliRunner()
    for path in (
        ["worker"],
        ["agent"],
        ["ingest"],
        ["notifier", "run"],
        ["demo"],
        ["broker"],
        ["record"],
        ["replay"],
        ["simulate"],
    ):
        out = runner.invoke(app, [*path, "--help"], catch_exceptions=False, env={"COLUMNS": "200"}).output
        assert "--log-level" in out and "--log-format" in out, path


def test_a_bad_output_format_is_a_usage_error_before_anything_is_read():
    result = CliRunner().invoke(app, ["incidents", "list", "-o", "csv"], env={"TAILHOUND_BROKER": "", "COLUMNS": "200"})
    assert result.exit_code == 2 and "use one of table, wide, json, yaml" in result.output
