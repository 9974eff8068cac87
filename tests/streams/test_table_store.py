"""``streams.store``: the setting, the store the app gets, and the RocksDB store's cheap read-back of its own writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.errors import ConfigError
from tailhound.settings import Settings, load_settings
from tailhound.snapshot import Snapshot
from tailhound.streams import table_store
from tailhound.streams.app import ROLLUP_STATE_TABLE, STATE_TABLE, create_app
from tailhound.streams.processor import SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.streams.table_store import StateStore, StoredState

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
needs_rocksdict = pytest.mark.skipif(not table_store.rocksdb_available(), reason="pip install 'tailhound[rocksdb]'")


def _settings(tmp_path: Path, store: str) -> Settings:
    return Settings(
        broker="kafka://127.0.0.1:1", rules_dir=Path("rules"), streams={"data_dir": tmp_path, "store": store}
    )


def test_store_defaults_to_memory_and_takes_rocksdb_from_env(monkeypatch):
    assert Settings().streams.store == "memory"
    monkeypatch.setenv("TAILHOUND_STREAMS__STORE", "rocksdb")
    assert load_settings().streams.store == "rocksdb"


@pytest.mark.parametrize("value", ["RocksDB", "disk", "rocksdb://", "", "memory "])
def test_store_accepts_only_memory_or_rocksdb(monkeypatch, value):
    monkeypatch.setenv("TAILHOUND_STREAMS__STORE", value)
    with pytest.raises(ConfigError, match="TAILHOUND_STREAMS__STORE: Input should be .memory. or .rocksdb."):
        load_settings()


def test_memory_store_app(tmp_path):
    app = create_app(_settings(tmp_path, "memory"), RULES)
    assert app.conf.store.scheme == "memory"


def test_rocksdb_without_its_binding_is_a_config_error_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(table_store, "rocksdb_available", lambda: False)
    with pytest.raises(ConfigError, match=r"rocksdict.*pip install 'tailhound\[rocksdb\]'"):
        create_app(_settings(tmp_path, "rocksdb"), RULES)


@pytest.fixture
def store(tmp_path) -> StateStore:
    """The node-state table's RocksDB store, its database calls replaced by a dict (no event, no files)."""
    app = create_app(_settings(tmp_path, "rocksdb"), RULES)
    assert app.conf.tabledir == tmp_path / "v1" / "tables"
    data = app.tables[STATE_TABLE].data
    assert isinstance(data, StateStore) and isinstance(app.tables[ROLLUP_STATE_TABLE].data, StateStore)
    db: dict[bytes, bytes] = {}
    data._get, data._set, data.db = db.get, db.__setitem__, db
    return data


def _state(version: int, node: str = "gpu-node-1") -> dict:
    return {"node": node, "version": version, "persisted_at": 10.0, "last_ts": {"dcgm": 10.0}, "incidents": {}}


@needs_rocksdict
def test_reading_back_its_own_write_skips_the_decode(store):
    store["gpu-node-1"] = _state(3)
    got = store["gpu-node-1"]
    assert isinstance(got, StoredState) and got.get("version") == 3 and got._value is None
    assert got["last_ts"] == {"dcgm": 10.0} and dict(got) == _state(3)  # anything else decodes it


@needs_rocksdict
def test_a_value_written_by_another_worker_is_decoded(store):
    store["gpu-node-1"] = _state(3)
    key = store._encode_key("gpu-node-1")
    store.db[key] = store._encode_value(_state(3) | {"persisted_at": 99.0})  # same version, other bytes (changelog)
    got = store["gpu-node-1"]
    assert type(got) is dict and got["persisted_at"] == 99.0
    store.apply_changelog_batch([], None, None)
    store["rollup"] = {"groups": {}}  # no version: always decoded
    assert type(store["rollup"]) is dict


@needs_rocksdict
def test_the_processor_uses_a_stored_state_it_does_not_hold(store):
    """After a failed step the processor drops its copy: a StoredState must then decode like a dict."""
    snap = Snapshot.model_validate({"node": "gpu-node-1", "source": "dcgm", "ts": 100.0, "samples": []})
    first = SnapshotProcessor(RULES).step(None, snap)
    store["gpu-node-1"] = first.state
    fresh = SnapshotProcessor(RULES)
    later = Snapshot.model_validate({"node": "gpu-node-1", "source": "dcgm", "ts": 200.0, "samples": []})
    result = fresh.step(store["gpu-node-1"], later)
    assert not result.redelivered and fresh._states["gpu-node-1"].last_ts == {"dcgm": 200.0} | {
        k: v for k, v in first.state["last_ts"].items() if k != "dcgm"
    }
