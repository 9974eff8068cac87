"""streams.data_dir: unset means a temporary directory (memory store), never the working directory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tailhound.errors import ConfigError
from tailhound.streams_settings import StreamsSettings


def test_unset_data_dir_is_a_temporary_directory_outside_the_working_directory():
    path = StreamsSettings().effective_data_dir
    assert path.is_absolute() and path.is_dir()
    assert Path(tempfile.gettempdir()) in path.parents and Path.cwd() not in path.parents
    assert StreamsSettings().effective_data_dir == path  # one per process: every app of it shares it


def test_rocksdb_needs_a_named_data_dir(tmp_path):
    with pytest.raises(ConfigError, match="TAILHOUND_STREAMS__DATA_DIR"):
        _ = StreamsSettings(store="rocksdb").effective_data_dir
    assert StreamsSettings(store="rocksdb", data_dir=tmp_path).effective_data_dir == tmp_path
