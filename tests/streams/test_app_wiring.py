"""How the worker app is wired for throughput (see BENCHMARKS.md, streams throughput): raw bytes on
its topics (decoded in the agents), the state codec on its tables, and the worker's process settings."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import pytest

import tailhound.streams.app
from tailhound.settings import Settings
from tailhound.streams.app import (
    LAYOUT_TABLE,
    MODEL_STATE_TABLE,
    ROLLUP_STATE_TABLE,
    STATE_TABLE,
    create_app,
    make_worker,
    tune_gc,
)
from tailhound.streams.codec import STATE_CODEC_NAME
from tailhound.streams.ruleset.rulefile import load_rules

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")


@pytest.fixture
def app(tmp_path):
    settings = Settings(broker="kafka://127.0.0.1:1", rules_dir=Path("rules"), streams={"data_dir": tmp_path})
    return settings, create_app(settings, RULES)


def test_topics_carry_raw_bytes_the_agents_decode(app):
    settings, faust_app = app
    topics = {agent.channel.get_topic_name(): agent.channel for agent in faust_app.agents.values()}
    assert set(topics) == {settings.telemetry_topic, settings.model_topic, settings.node_incidents_topic}
    assert all(t.value_serializer == "raw" and t.key_serializer == "raw" for t in topics.values())


def test_state_tables_write_json_with_the_state_codec(app):
    _, faust_app = app
    assert set(faust_app.tables) == {STATE_TABLE, MODEL_STATE_TABLE, ROLLUP_STATE_TABLE, LAYOUT_TABLE}
    for table in faust_app.tables.values():
        changelog = table.changelog_topic
        assert (table.key_serializer, table.value_serializer) == ("json", STATE_CODEC_NAME)
        assert (changelog.key_serializer, changelog.value_serializer) == ("json", STATE_CODEC_NAME)
        assert changelog.get_topic_name().endswith(f"-{table.name}-changelog")
        assert table.default is None and table.data.value_serializer == STATE_CODEC_NAME


def test_the_worker_keeps_the_configured_log_level(app, monkeypatch):
    settings, faust_app = app
    tuned = []
    monkeypatch.setattr(tailhound.streams.app, "tune_gc", lambda: tuned.append(True))
    worker = make_worker(faust_app, settings)
    assert worker.spinner is None and tuned == [True]
    logger = logging.getLogger("tailhound-test-root")
    logger.setLevel(logging.WARNING)
    worker.on_setup_root_logger(logger, logging.WARNING)  # with a spinner, Faust sets DEBUG here
    assert logger.level == logging.WARNING and logger.handlers == []


def test_tune_gc_freezes_what_exists_and_raises_the_young_threshold():
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (tailhound.streams.app.GC_GEN0_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_group_settings_reach_faust(tmp_path):
    """Standby replicas and the static member id (issue 16) are the Faust app's, and the consumer's."""
    settings = Settings(
        broker="kafka://127.0.0.1:1",
        rules_dir=Path("rules"),
        streams={"data_dir": tmp_path, "standby_replicas": 2, "instance_id": "tailhound-worker-1"},
    )
    conf = create_app(settings, RULES).conf
    assert conf.table_standby_replicas == 2 and conf.consumer_group_instance_id == "tailhound-worker-1"
    default = create_app(
        Settings(broker="kafka://127.0.0.1:1", rules_dir=Path("rules"), streams={"data_dir": tmp_path}), RULES
    ).conf
    assert default.table_standby_replicas == 1 and default.consumer_group_instance_id is None


@pytest.mark.parametrize(
    "bad",
    [
        {"instance_id": "worker 1"},
        {"instance_id": "w/1"},
        {"standby_replicas": -1},
        {"rollup_max_delay_s": -1},
        {"rollup_max_delay_s": 3600},
    ],
)
def test_group_settings_are_validated(bad):
    with pytest.raises(ValueError):
        Settings(streams=bad)
