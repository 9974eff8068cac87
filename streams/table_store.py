"""Where the worker's tables live (``streams.store``): Faust's in-memory store, or RocksDB on disk.

``memory`` (the default) keeps every table in the worker's memory and rebuilds it from the changelog
topics on every start. ``rocksdb`` keeps them in RocksDB databases (one per table partition) under
``<streams.data_dir>/v1/tables/``, through Faust's RocksDB store and the ``rocksdict`` binding (the
``tailhound[rocksdb]`` extra): a restart opens the local databases and reads only the changelog written
since, and the states of a fleet larger than memory stay on disk.

:class:`StateStore` is Faust's RocksDB store with two changes:

- memory bounds of its own (:data:`WRITE_BUFFER_BYTES` per database, one block cache of
  :data:`BLOCK_CACHE_BYTES` shared by all; Faust's defaults are 64 MB x 3 write buffers and a 2 GB cache
  per database, and a worker opens one database per partition of each of its three tables);
- reading back a state it wrote itself costs no decode. Every snapshot reads its node's ~17-25 KB
  JSON state, and decoding it (~0.3 ms) would cost the worker a third of its speed; but
  :class:`tailhound.streams.processor.SnapshotProcessor` reads only the ``version`` of the stored state
  while it matches the decoded state it keeps. So for a JSON object with an integer ``version`` the store
  remembers, per key, that version and the length and hash of the bytes it wrote; a read whose bytes
  match returns :class:`StoredState`, which answers ``version`` at once and decodes on any other access.
  The check is on the bytes read, so a value another worker wrote (recovered from the changelog after a
  rebalance) never passes for ours.

It also turns off Faust's recovery consistency check (see :class:`StateStore`): a worker whose changelog
topics were deleted or whose broker lost them (the bundled broker keeps nothing across its restarts)
must start with an empty ``streams.data_dir``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from typing import Any

from faust import stores
from faust.stores import rocksdb as faust_rocksdb

from tailhound.errors import ConfigError
from tailhound.streams_settings import StreamsSettings

#: the Faust store URL scheme of :class:`StateStore` (registered with Faust's store registry on import)
SCHEME = "tailhound-rocksdb"
EXTRA = "tailhound[rocksdb]"
#: memtable size of each database (Faust: 64 MB); at most two per database
WRITE_BUFFER_BYTES = 8 * 1024**2
WRITE_BUFFERS = 2
#: one block cache for every database of the process (Faust: 2 GB per database)
BLOCK_CACHE_BYTES = 64 * 1024**2

stores.STORES.aliases.setdefault(SCHEME, f"{__name__}:StateStore")


def rocksdb_available() -> bool:
    """Whether the RocksDB binding Faust uses (``rocksdict``) is installed."""
    return importlib.util.find_spec("rocksdict") is not None


def store_url(settings: StreamsSettings) -> str:
    """The Faust ``store`` URL for ``settings.store``; a ConfigError when rocksdb is chosen without its binding."""
    if settings.store == "memory":
        return "memory://"
    if not rocksdb_available():
        raise ConfigError(
            f"streams.store is 'rocksdb' but the RocksDB binding (rocksdict) is not installed: "
            f"pip install '{EXTRA}', or set streams.store to 'memory'"
        )
    return f"{SCHEME}://"


class StoredState(Mapping[str, Any]):
    """A stored JSON object this worker wrote, read back: ``version`` without decoding, anything else
    decodes the bytes (once)."""

    __slots__ = ("version", "_raw", "_decode", "_value")

    def __init__(self, raw: bytes, version: int, decode: Any) -> None:
        self.version = version
        self._raw, self._decode = raw, decode
        self._value: dict[str, Any] | None = None

    def decoded(self) -> dict[str, Any]:
        """The whole object, as the store's codec reads it."""
        if self._value is None:
            self._value = self._decode(self._raw)
        return self._value

    def get(self, key: str, default: Any = None) -> Any:
        return self.version if key == "version" else self.decoded().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.version if key == "version" else self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __repr__(self) -> str:
        return f"StoredState(version={self.version}, {len(self._raw)} bytes)"


class _Options(faust_rocksdb.RocksDBOptions):
    """Faust's RocksDB options with one block cache for the whole process."""

    _shared_cache: Any = None

    def as_options(self) -> Any:
        options = super().as_options()
        rocksdict = faust_rocksdb.rocksdict  # the binding Faust imported (None without it)
        if not self.use_rocksdict or rocksdict is None:
            return options
        if _Options._shared_cache is None:
            _Options._shared_cache = rocksdict.Cache(self.block_cache_size)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, block_based=True)
        table.set_block_cache(_Options._shared_cache)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        return options


class StateStore(faust_rocksdb.Store):
    """Faust's RocksDB table store with bounded memory and cheap read-backs of its own writes (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        defaults = {
            "write_buffer_size": WRITE_BUFFER_BYTES,
            "max_write_buffer_number": WRITE_BUFFERS,
            "block_cache_size": BLOCK_CACHE_BYTES,
        }
        self.rocksdb_options = _Options(**{**defaults, **self.options}, use_rocksdict=self.use_rocksdict)
        #: key -> (version, length, hash) of the JSON object this store last wrote under it
        self._written: dict[bytes, tuple[int, int, int]] = {}
        # Faust checks at recovery that the offset a local database holds is below the changelog's end offset
        # (ListOffsets). The bundled broker answers the base offset of the last batch there, not its end, so
        # after any batched changelog write every restart would fail that check; the offsets Faust keeps are
        # the acknowledged ones and reading from them is right on either broker (docs/operations.md).
        self.app.conf.recovery_consistency_check = False

    def __getitem__(self, key: Any) -> Any:
        k = self._encode_key(key)
        raw = self._get(k)
        if raw is None:
            raise KeyError(key)
        mine = self._written.get(k)
        if mine is not None and mine[1] == len(raw) and mine[2] == hash(raw):
            return StoredState(raw, mine[0], self._decode_value)
        return self._decode_value(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        k, raw = self._encode_key(key), self._encode_value(value)
        self._set(k, raw)
        version = value.get("version") if isinstance(value, Mapping) else None
        if isinstance(version, int) and not isinstance(version, bool) and raw is not None:
            self._written[k] = (version, len(raw), hash(raw))
        else:
            self._written.pop(k, None)

    def _del(self, key: bytes) -> None:
        self._written.pop(key, None)
        super()._del(key)

    def revoke_partitions(self, table: Any, tps: Any) -> None:
        """Faust's, without its full ``gc.collect()`` (on every rebalance and stop): a database dropped here
        is closed when its last reference goes, and a full collection walks all of the worker's state and
        also ends asyncio tasks that nothing but the event loop (weakly) holds."""
        for tp in tps:
            if tp.topic in table.changelog_topic.topics and self._dbs.pop(tp.partition, None) is not None:
                self.logger.info("closing db %s partition %s", tp.topic, tp.partition)

    async def stop(self) -> None:
        self.logger.info("Closing rocksdb on stop")
        self._dbs.clear()

    async def on_rebalance(self, assigned: Any, revoked: Any, newly_assigned: Any, generation_id: int = 0) -> None:
        self._written.clear()  # only memory: a read checks the bytes anyway
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
