"""The agent's outbox: a bounded FIFO of encoded snapshots waiting for the broker.

Collection appends and never waits; the sender takes from the head and removes messages only once
the broker acknowledged them, so an outage shorter than the buffer loses nothing and everything is
resent in order. Beyond the bound the OLDEST messages are dropped (fresh data matters more during a
long outage) and counted.

With ``spill_file`` set, messages that do not fit in memory go to an append-only file instead of
being dropped, and the file is drained (in order, before newer in-memory messages) when the broker
is back. Whatever is still buffered at shutdown is written to that file and read back on the next
start, so a restarted agent resends it.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tailhound.agent.buffer")


@dataclass(frozen=True)
class Message:
    key: bytes
    value: bytes

    def to_line(self) -> str:
        return json.dumps({"k": base64.b64encode(self.key).decode(), "v": base64.b64encode(self.value).decode()})

    @classmethod
    def from_line(cls, line: str) -> Message:
        d = json.loads(line)
        return cls(key=base64.b64decode(d["k"]), value=base64.b64decode(d["v"]))


class FileQueue:
    """Append-only JSON-lines file read from the front; removed once fully drained."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._head: deque[Message] = deque()
        self.count = 0
        if path.exists():
            with path.open("rb") as fh:
                self.count = sum(1 for line in fh if line.strip())

    def __len__(self) -> int:
        return self.count

    def append(self, msg: Message) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(msg.to_line() + "\n")
        self.count += 1

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def peek(self, n: int) -> list[Message]:
        if len(self._head) < n and self.count > len(self._head):
            with self.path.open("rb") as fh:
                fh.seek(self._pos)
                while len(self._head) < n:
                    line = fh.readline()
                    if not line:
                        break
                    self._pos = fh.tell()
                    if not line.strip():
                        continue
                    try:
                        self._head.append(Message.from_line(line.decode("utf-8")))
                    except (ValueError, KeyError) as exc:
                        log.warning("%s: skipping a corrupt line: %s", self.path, exc)
                        self.count -= 1
        return list(self._head)[:n]

    def pop(self, n: int) -> None:
        for _ in range(min(n, len(self._head))):
            self._head.popleft()
            self.count -= 1
        if self.count <= 0:
            self.count = 0
            self._pos = 0
            self._head.clear()
            self.path.unlink(missing_ok=True)

    def drain_all(self) -> list[Message]:
        return self.peek(self.count)


class Outbox:
    def __init__(
        self,
        max_messages: int = 100_000,
        max_bytes: int = 64 << 20,
        spill_file: Path | None = None,
        spill_max_bytes: int = 1 << 30,
    ) -> None:
        self.max_messages, self.max_bytes = max_messages, max_bytes
        self.spill_max_bytes = spill_max_bytes
        self._mem: deque[Message] = deque()
        self._mem_bytes = 0
        self.dropped = 0
        self.spill_file = spill_file
        self._resend: FileQueue | None = None  # left by the previous run: the oldest of all
        self._spill: FileQueue | None = None  # newer than everything in memory
        if spill_file is not None:
            spill_file.parent.mkdir(parents=True, exist_ok=True)
            if spill_file.exists():
                resend = spill_file.with_name(spill_file.name + ".resend")
                if not resend.exists():
                    os.replace(spill_file, resend)
                self._resend = FileQueue(resend)
                log.info("outbox: %d snapshot(s) left by the last run (%s) are sent first", len(self._resend), resend)
            self._spill = FileQueue(spill_file)

    def __len__(self) -> int:
        return len(self._resend or ()) + len(self._mem) + len(self._spill or ())

    @property
    def bytes(self) -> int:
        return self._mem_bytes

    @property
    def fill_ratio(self) -> float:
        """How full the memory part is (0..1)."""
        return max(len(self._mem) / self.max_messages, self._mem_bytes / self.max_bytes)

    def append(self, msg: Message) -> None:
        size = len(msg.key) + len(msg.value)
        if self._spill is not None and (len(self._spill) or self._mem_full(size)):
            if self._spill.size() < self.spill_max_bytes:
                try:
                    self._spill.append(msg)
                    return
                except OSError as exc:
                    log.warning("cannot spill to %s: %s", self._spill.path, exc)
            if len(self._spill):
                self._count_drop()  # keep the order: never put a newer message in memory before the file
                return
        while self._mem and self._mem_full(size):
            old = self._mem.popleft()
            self._mem_bytes -= len(old.key) + len(old.value)
            self._count_drop()
        self._mem.append(msg)
        self._mem_bytes += size

    def _mem_full(self, size: int) -> bool:
        return len(self._mem) + 1 > self.max_messages or self._mem_bytes + size > self.max_bytes

    def _count_drop(self) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warning(
                "outbox full: dropped %d snapshot(s) so far (broker unreachable for too long; "
                "raise publish.buffer.max_messages/max_bytes or set a spill_file)",
                self.dropped,
            )

    def _front(self) -> FileQueue | deque[Message] | None:
        if self._resend is not None and len(self._resend):
            return self._resend
        if self._mem:
            return self._mem
        if self._spill is not None and len(self._spill):
            return self._spill
        return None

    def peek(self, n: int) -> list[Message]:
        """Up to `n` oldest messages, without removing them."""
        front = self._front()
        if front is None:
            return []
        if isinstance(front, FileQueue):
            return front.peek(n)
        return [front[i] for i in range(min(n, len(front)))]

    def pop(self, n: int) -> None:
        """Remove the `n` messages the last :meth:`peek` returned (the broker has them)."""
        front = self._front()
        if isinstance(front, FileQueue):
            front.pop(n)
        elif front is not None:
            for _ in range(min(n, len(front))):
                m = front.popleft()
                self._mem_bytes -= len(m.key) + len(m.value)

    def persist(self) -> int:
        """At shutdown: write everything still buffered to the spill file, oldest first."""
        if self.spill_file is None:
            return 0
        pending = (self._resend.drain_all() if self._resend else []) + list(self._mem)
        pending += self._spill.drain_all() if self._spill else []
        tmp = self.spill_file.with_name(self.spill_file.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for m in pending:
                fh.write(m.to_line() + "\n")
        if self._resend is not None:
            self._resend.path.unlink(missing_ok=True)
        os.replace(tmp, self.spill_file)
        if not pending:
            self.spill_file.unlink(missing_ok=True)
        return len(pending)
