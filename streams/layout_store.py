"""The version-3 layouts a worker reads, kept in a changelogged table as well as in memory.

A part that references its layout (``publish.layout_every_s``) can only be read by a worker that has the
layout. Kept in memory only, a worker that restarts, or takes a node's partition over, dead-letters the node's
snapshots (``unknown_layout``) until the agent sends the layout again, up to ``layout_every_s`` later. Here each
layout read in full is also written to the ``layouts`` table (keyed by node, so it is partitioned with the node's
telemetry and recovered with it), once per new layout id, and a layout missing from memory is looked up there.
What the table holds is checked again when it is read back (:func:`tailhound.wire.v3_decode.layout_from_tables`);
a record that does not read is as good as none: the part is refused as before and the agent's refresh repairs it.
"""

from __future__ import annotations

import base64
import binascii
import logging
import zlib
from collections import Counter
from collections.abc import MutableMapping
from typing import Any

from tailhound.wire.v3 import Part
from tailhound.wire.v3_decode import Layout, LayoutCache, layout_from_tables, tables_of

log = logging.getLogger(__name__)

#: layouts kept per node in the table (its sources, and a change or two of each), the newest
MAX_PER_NODE = 8
#: a layout's tables larger than this are not stored (the agent's refresh still serves it)
MAX_TABLES_BYTES = 256 * 1024
STORE_VERSION = 1
#: layouts kept in memory per node the worker may hold (its 4 sources, with room for changes) and at least
LAYOUTS_PER_NODE, MIN_LAYOUTS = 6, 32_768


def memory_bound(max_nodes: int) -> int:
    """The layouts a worker keeps in memory for `max_nodes` nodes (0: no cap, sized as the default's 20,000):
    fewer than its nodes' sources and every message misses (the least recently used is the next needed)."""
    return max(MIN_LAYOUTS, LAYOUTS_PER_NODE * (max_nodes or 20_000))


class StoredLayouts(LayoutCache):
    """A :class:`LayoutCache` whose layouts also live in `table` (node -> record), for the next owner."""

    def __init__(
        self, table: MutableMapping[str, Any], max_layouts: int = 32_768, counts: Counter[str] | None = None
    ) -> None:
        super().__init__(max_layouts)
        self.table = table
        #: layouts written to the table, recalled from it, stored ones that did not read (IntakeStats.layouts)
        self.counts: Counter[str] = counts if counts is not None else Counter()
        # the layouts of the message being admitted, written when it is (settle)
        self._pending: list[tuple[str, str, str]] = []

    def get(self, node: str, layout_id: bytes) -> Layout | None:
        layout = super().get(node, layout_id)
        if layout is None:  # (a restart or a takeover since the layout was read: the table has it)
            layout = self._recall(node, layout_id)
            if layout is not None:
                super().put(node, layout_id, layout)
                self.counts["recalled"] += 1
        return layout

    def put(self, node: str, layout_id: bytes, layout: Layout, part: Part | None = None) -> None:
        super().put(node, layout_id, layout)
        key = layout_id.hex()
        if part is None or any(k == key for k, _ in _entries(self.table.get(node))):
            return  # (a refresh: stored when first read, here or by the partition's previous owner)
        tables = tables_of(part)
        if len(tables) > MAX_TABLES_BYTES:
            return
        # (deflated: a node's 4 layouts are ~3.8 KB of MessagePack, 1.9 KB deflated, and the table keeps them in memory)
        self._pending.append((node, key, base64.b64encode(zlib.compress(tables, 6)).decode()))

    def settle(self, admitted: bool) -> None:
        pending, self._pending = self._pending, []
        if not admitted:
            return  # (a message refused by its key or its time leaves nothing in the table)
        for node, key, packed in pending:
            entries = [e for e in _entries(self.table.get(node)) if e[0] != key]
            self.table[node] = {"v": STORE_VERSION, "layouts": [*entries, [key, packed]][-MAX_PER_NODE:]}
            self.counts["written"] += 1

    def forget(self, node: str) -> None:
        if self.table.get(node) is not None:
            del self.table[node]

    def _recall(self, node: str, layout_id: bytes) -> Layout | None:
        record = self.table.get(node)
        key = layout_id.hex()
        for k, tables in _entries(record):
            if k == key:
                layout = _read(tables)
                if layout is None:
                    self.counts["unreadable"] += 1
                    log.warning("the stored layout %s of %s does not read; its parts wait for a refresh", key, node)
                return layout
        return None


def _read(packed: str) -> Layout | None:
    """The layout of a stored entry (inflated within MAX_TABLES_BYTES), or None."""
    try:
        inflater = zlib.decompressobj()
        tables = inflater.decompress(base64.b64decode(packed, validate=True), MAX_TABLES_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
    except (binascii.Error, zlib.error, ValueError):
        return None
    return layout_from_tables(tables)


def _entries(record: Any) -> list[list[str]]:
    """The [id, tables] pairs of a stored record, whatever was stored (anything else: none)."""
    if not isinstance(record, dict) or record.get("v") != STORE_VERSION:
        return []
    entries = record.get("layouts")
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e)]
