from __future__ import annotations

import pytest

from tailhound.errors import ConfigError
from tailhound.settings import Settings, bootstrap_servers, load_settings


def test_defaults():
    s = load_settings()
    assert s.broker is None
    assert s.topics == [
        "tailhound.telemetry",
        "tailhound.incidents",
        "tailhound.deadletter",
        "tailhound.notifier-state",
    ]
    assert s.rules_dir.is_dir()


def test_env_overrides_yaml_file_which_overrides_defaults(tmp_path, monkeypatch):
    cfg = tmp_path / "tailhound.yaml"
    cfg.write_text("topic_prefix: prod.\npartitions: 8\nstreams:\n  app_id: from-file\n  commit_interval_s: 2\n")
    monkeypatch.setenv("TAILHOUND_BROKER", "kafka://k1:9092,k2:9092")
    monkeypatch.setenv("TAILHOUND_STREAMS__COMMIT_INTERVAL_S", "0.5")
    s = load_settings(cfg)
    assert s.broker == "kafka://k1:9092,k2:9092"
    assert s.telemetry_topic == "prod.telemetry" and s.partitions == 8
    assert s.streams.app_id == "from-file" and s.streams.commit_interval_s == 0.5


def test_config_file_from_env(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("topic_prefix: x.\n")
    monkeypatch.setenv("TAILHOUND_CONFIG", str(cfg))
    assert load_settings().topic_prefix == "x."


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("partitions: 0\n", "partitions"),
        ("no_such_setting: 1\n", "no_such_setting"),
        ("broker: http://x:1\n", "broker"),
        ("streams: [1, 2\n", "c.yaml:"),
        ("- a list\n", "mapping"),
    ],
)
def test_bad_settings_file_fails_with_a_precise_message(tmp_path, text, needle):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg)
    assert needle in str(exc.value)


def test_missing_settings_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml")


def test_bootstrap_servers():
    assert bootstrap_servers("kafka://a:9092") == ["a:9092"]
    assert bootstrap_servers("kafka://a:1;kafka://b:2") == ["a:1", "b:2"]
    assert bootstrap_servers("a:1,b:2") == ["a:1", "b:2"]
    for bad in ("kafka://", "kafka://host", "http://a:1"):
        with pytest.raises(ValueError):
            bootstrap_servers(bad)


def test_settings_model_forbids_unknown_fields():
    with pytest.raises(ValueError):
        Settings(nonsense=1)


def test_worker_child_env_round_trips_every_streams_setting(tmp_path, monkeypatch):
    """The demo/test worker child gets its settings through env: complex values must survive."""
    from tailhound.settings import Settings, load_settings
    from tailhound.worker.process import WorkerProcess

    s = Settings(
        broker="kafka://127.0.0.1:9",
        streams={"ttft_p99_sla_s": {"batch-*": 10.0, "*": 1.5}, "load_models": [tmp_path / "m.json"]},
    )
    captured = {}
    monkeypatch.setattr("subprocess.Popen", lambda *a, **kw: captured.update(kw) or type("P", (), {"pid": 1})())
    WorkerProcess(s, tmp_path / "w.log").start()
    for k in [k for k in list(__import__("os").environ) if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(k)
    for k, v in captured["env"].items():
        if k.startswith("TAILHOUND_"):
            monkeypatch.setenv(k, v)
    got = load_settings()
    assert got.streams.ttft_p99_sla_s == {"batch-*": 10.0, "*": 1.5}
    assert got.streams.load_models == [tmp_path / "m.json"]
