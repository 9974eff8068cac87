"""One config experience: the same durations in every file kind, Alertmanager's route keys, and errors at
FILE:LINE:COL with the key, a suggestion and no pydantic internals."""

from __future__ import annotations

import pytest

from tailhound.agents.config import parse_agent_config
from tailhound.capacity_file import load_capacity_file
from tailhound.durations import parse_duration
from tailhound.errors import ConfigFileError
from tailhound.ingest.config import parse_ingest_config
from tailhound.notifier.config import parse_config
from tailhound.settings import load_settings

AM = "receivers:\n- {type: alertmanager, name: am, urls: ['http://127.0.0.1:9093'], %s}\nroute: {receiver: am}\n"

#: the example route of Alertmanager's configuration docs (prometheus.io/docs/alerting/latest/configuration/),
#: with its per-route group_by / group_wait left out (grouping is one setting here)
ALERTMANAGER_ROUTE = """\
route:
  receiver: 'default-receiver'
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  group_by: [cluster, alertname]
  # All alerts that do not match the following child routes
  # will remain at the root node and be dispatched to 'default-receiver'.
  routes:
  # All alerts with service=mysql or service=cassandra
  # are dispatched to the database pager.
  - receiver: 'database-pager'
    matchers:
    - service=~"mysql|cassandra"
  # All alerts with the team=frontend label match this sub-route.
  - receiver: 'frontend-pager'
    matchers:
    - team="frontend"
    continue: true
receivers:
- {type: console, name: default-receiver}
- {type: console, name: database-pager}
- {type: console, name: frontend-pager}
"""


def _error(fn, *args) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as exc:
        fn(*args)
    return exc.value


@pytest.mark.parametrize(
    "text,seconds",
    [
        (90, 90.0),
        ("90", 90.0),
        ("1.5", 1.5),
        ("500ms", 0.5),
        ("10s", 10.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
    ],
)
def test_one_parser_takes_seconds_and_prometheus_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["5x", "1m1h", "-5s", True, "m"])
def test_a_bad_duration_says_the_accepted_forms(bad):
    with pytest.raises(ValueError, match="500ms, 10s, 5m, 1h30m"):
        parse_duration(bad)


def test_every_file_kind_takes_5m_in_its_seconds_fields(tmp_path, monkeypatch):
    agent = parse_agent_config(
        "scrape: [{job: vllm, url: 'http://127.0.0.1:8000/metrics', interval_s: 1m, "
        "timeout_s: 1500ms}]\npublish: {request_timeout_s: 2m, linger_ms: 1s}\n"
    )
    assert (agent.scrape[0].interval_s, agent.scrape[0].timeout_s) == (60.0, 1.5)
    assert (agent.publish.request_timeout_s, agent.publish.linger_ms) == (120.0, 1000)
    notifier = parse_config(
        "receivers: [{type: slack, name: s, channel: '#x', token: {env: T}, timeout_s: 5m,"
        " min_interval_s: 2s}]\nroute: {receiver: s}\n"
    )
    assert (notifier.receivers[0].timeout_s, notifier.receivers[0].min_interval_s) == (300.0, 2.0)
    ingest = parse_ingest_config("poll_s: 500ms\nremote_write: {retry_after_s: 1m, grouping: {settle_s: 10s}}\n")
    assert (ingest.poll_s, ingest.remote_write.retry_after_s, ingest.remote_write.grouping.settle_s) == (0.5, 60, 10)
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "streams:\n  node_expiry_s: 1h30m\n  ttft_p99_sla_s: {'*': 1500ms}\nnotifier: {tick_s: 200ms}\n"
    )
    monkeypatch.setenv("TAILHOUND_STREAMS__COMMIT_INTERVAL_S", "2s")
    s = load_settings(settings)
    assert (s.streams.node_expiry_s, s.streams.ttft_p99_sla_s, s.notifier.tick_s) == (5400.0, {"*": 1.5}, 0.2)
    assert s.streams.commit_interval_s == 2.0
    cap = tmp_path / "capacity.yaml"
    cap.write_text(
        "generated_at: 1\nsource: test\nmodels:\n  '*': {safe_request_rate: 2, queue_scale_out: 1, "
        "max_num_seqs: 8, ttft_knee_s: 800ms}\n"
    )
    assert load_capacity_file(cap).models["*"].ttft_knee_s == 0.8


def test_a_short_repost_interval_alone_is_valid_and_fields_compare_parsed():
    assert parse_config(AM % "repost_interval: 10s").receivers[0].timeout_s == 5.0
    assert parse_config(AM % "repost_interval: 1m, timeout_s: 30s").receivers[0].timeout_s == 30.0
    err = _error(parse_config, AM % "repost_interval: 10s, timeout_s: 10", "n.yaml")
    assert str(err).startswith("n.yaml:2:3: receivers[0]: timeout_s (10s) must be shorter than repost_interval (10s)")


def test_an_alertmanager_route_block_from_its_docs_loads():
    config = parse_config(ALERTMANAGER_ROUTE)
    g = config.grouping
    assert (g.by, g.wait, g.interval, g.repeat) == (["cluster", "alertname"], 30.0, 300.0, 14400.0)
    assert [r.receiver for r in config.route.routes] == ["database-pager", "frontend-pager"]
    assert config.route.routes[1].continue_ is True


@pytest.mark.parametrize(
    "change,message",
    [
        (
            ("  - receiver: 'frontend-pager'\n", "  - receiver: 'frontend-pager'\n    group_wait: 10s\n"),
            "n.yaml:16:5: route.routes[1]: group_wait: groups are formed before routing",
        ),
        (
            ("    matchers:\n    - team", "    match: {team: frontend}\n    matchers:\n    - team"),
            "n.yaml:16:5: route.routes[1]: match: deprecated in Alertmanager and not read here: use `matchers:",
        ),
        (
            ("  routes:\n", "  mute_time_intervals: [nights]\n  routes:\n"),
            "n.yaml:1:1: route: mute_time_intervals: time intervals are not supported: declare a `maintenance:` window",
        ),
        (
            ("receivers:\n", "grouping: {wait: 1m}\nreceivers:\n"),
            "route.group_wait and grouping.wait are the same setting: write one of them",
        ),
    ],
)
def test_alertmanager_keys_that_mean_something_else_say_what_to_use(change, message):
    err = _error(parse_config, ALERTMANAGER_ROUTE.replace(*change), "n.yaml")
    assert message in str(err)


def test_unknown_keys_have_file_line_column_and_a_suggestion():
    err = _error(parse_agent_config, "node: n1\npublish:\n  lingr_ms: 5\n  request_timeout_s: soon\n", "a.yaml")
    assert [p.text() for p in err.problems] == [
        "a.yaml:3:3: publish: unknown key 'lingr_ms' (did you mean 'linger_ms'?)",
        "a.yaml:4:22: publish.request_timeout_s: invalid duration 'soon': use a number of seconds (90, 1.5) or a "
        "duration such as 500ms, 10s, 5m, 1h30m",
    ]
    assert str(err).startswith("a.yaml:3:3: publish: unknown key 'lingr_ms' (did you mean 'linger_ms'?) (and 1 more")


@pytest.mark.parametrize(
    "load,text",
    [
        (parse_agent_config, "publish: {compression: lz4x}\nlisten: [1]\n"),
        (parse_ingest_config, "poll_s: abc\nmax_concurrent_requests: many\n"),
        (parse_config, "receivers: [{type: slakc, name: s}]\ngrouping: {by: 3}\n"),
    ],
)
def test_no_pydantic_internals_in_any_message(load, text):
    err = _error(load, text)
    for shown in [str(err), *(p.text() for p in err.problems)]:
        for internal in ("input_type", "input_value", "errors.pydantic.dev", "Value error,", "[type="):
            assert internal not in shown, shown


def test_a_wrong_receiver_type_suggests_the_nearest():
    err = _error(parse_config, "receivers: [{type: slakc, name: s}]\nroute: {receiver: s}\n", "n.yaml")
    assert str(err) == "n.yaml:1:20: receivers[0]: unknown receiver type 'slakc' (did you mean 'slack'?)"


def test_settings_file_errors_name_file_line_and_key(tmp_path, monkeypatch):
    monkeypatch.delenv("TAILHOUND_CONFIG", raising=False)
    f = tmp_path / "settings.yaml"
    f.write_text("broker: kafka://127.0.0.1:9092\nstreams:\n  app_idd: x\n")
    err = _error(load_settings, f)
    assert str(err) == f"{f}:3:3: streams: unknown key 'app_idd' (did you mean 'app_id'?)"


def test_settings_environment_errors_name_the_variable(monkeypatch):
    monkeypatch.delenv("TAILHOUND_CONFIG", raising=False)
    monkeypatch.setenv("TAILHOUND_STREAMS__APP_IDD", "x")
    err = _error(load_settings)
    assert "unknown variable TAILHOUND_STREAMS__APP_IDD (did you mean 'TAILHOUND_STREAMS__APP_ID'?)" in str(err)
    monkeypatch.delenv("TAILHOUND_STREAMS__APP_IDD")
    monkeypatch.setenv("TAILHOUND_STREAMS__SESSION_TIMEOUT_S", "soon")
    err = _error(load_settings)
    assert "TAILHOUND_STREAMS__SESSION_TIMEOUT_S: invalid duration 'soon'" in str(err)


def test_a_settings_file_refuses_duplicate_keys_like_every_config_file(tmp_path):
    f = tmp_path / "settings.yaml"
    f.write_text("partitions: 2\npartitions: 4\n")
    assert "duplicate key 'partitions' (first at line 1)" in str(_error(load_settings, f))
