"""The agent outbox: bounded, in order, drops oldest, spills to a file, survives a restart."""

from __future__ import annotations

from tailhound.agents.buffer import Message, Outbox


def msgs(*values: int) -> list[Message]:
    return [Message(key=b"n", value=str(v).encode()) for v in values]


def drain(box: Outbox, batch: int = 3) -> list[int]:
    out = []
    while batch_ := box.peek(batch):
        out.extend(int(m.value) for m in batch_)
        box.pop(len(batch_))
    return out


def test_fifo_and_peek_does_not_remove():
    box = Outbox(max_messages=10)
    for m in msgs(1, 2, 3, 4):
        box.append(m)
    assert [int(m.value) for m in box.peek(2)] == [1, 2]
    assert [int(m.value) for m in box.peek(2)] == [1, 2]
    assert drain(box) == [1, 2, 3, 4] and len(box) == 0


def test_full_memory_drops_the_oldest_and_counts(caplog):
    box = Outbox(max_messages=3)
    for m in msgs(*range(10)):
        box.append(m)
    assert box.dropped == 7 and drain(box) == [7, 8, 9]
    assert "dropped 1 snapshot" in caplog.text


def test_byte_bound():
    box = Outbox(max_messages=1000, max_bytes=1024)
    for _ in range(10):
        box.append(Message(b"k", b"x" * 300))
    assert len(box) == 3 and box.bytes <= 1024 and box.dropped == 7


def test_spill_file_keeps_order_while_draining(tmp_path):
    box = Outbox(max_messages=3, spill_file=tmp_path / "spill.jsonl")
    for m in msgs(*range(8)):
        box.append(m)
    assert box.dropped == 0 and len(box) == 8
    got = [int(m.value) for m in box.peek(3)]
    box.pop(3)
    for m in msgs(8, 9):  # arrive while the file is being drained: they go behind it
        box.append(m)
    assert got + drain(box) == list(range(10))
    assert not (tmp_path / "spill.jsonl").exists()


def test_spill_limit_drops_newest_to_keep_order(tmp_path):
    box = Outbox(max_messages=2, spill_file=tmp_path / "s.jsonl", spill_max_bytes=1024)
    for m in msgs(*range(200)):
        box.append(m)
    out = drain(box, 50)
    assert out == sorted(out) and out[:2] == [0, 1] and box.dropped == 200 - len(out)


def test_restart_resends_what_was_left_first(tmp_path):
    path = tmp_path / "spill.jsonl"
    box = Outbox(max_messages=3, spill_file=path)
    for m in msgs(*range(6)):
        box.append(m)
    box.pop(len(box.peek(1)))  # 0 was sent
    assert box.persist() == 5
    again = Outbox(max_messages=3, spill_file=path)
    for m in msgs(100, 101):
        again.append(m)
    assert len(again) == 7
    assert drain(again) == [1, 2, 3, 4, 5, 100, 101]
    assert list(tmp_path.iterdir()) == []
