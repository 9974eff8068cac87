"""Dead letters always fit (item 2 of the hardening issue): a 1.2 MB non-UTF-8 message made a dead letter
over the producer's 1 MiB limit, the send raised and the worker's agent crashed."""

from __future__ import annotations

import base64
import hashlib
import json

from tailhound.deadletter import MAX_KEY, MAX_PAYLOAD_BYTES, MAX_REASON, DeadLetter

PRODUCER_LIMIT = 1_000_000  # Faust's producer_max_request_size (aiokafka's is 1 MiB)


def letter(raw: bytes, **kw) -> DeadLetter:
    fields = {"ts": 1.0, "reason": "bad", "stage": "decode", "topic": "t.telemetry", "partition": 0, "offset": 7}
    fields.update(kw)
    return DeadLetter.from_bytes(raw, **fields)


def test_an_oversized_binary_message_gives_a_bounded_dead_letter_that_says_so():
    raw = bytes(range(256)) * (1_200_000 // 256)  # 1.2 MB, not UTF-8
    d = letter(raw)
    wire = d.encoded()
    assert len(wire) < PRODUCER_LIMIT / 10  # before: ~1.6 MB of base64, over the limit
    assert d.payload_truncated and d.payload_encoding == "base64"
    assert d.payload_size == len(raw) and d.payload_sha256 == hashlib.sha256(raw).hexdigest()
    assert d.original_bytes() == raw[:MAX_PAYLOAD_BYTES]
    back = DeadLetter.model_validate_json(wire)
    assert back == d


def test_a_small_message_is_kept_whole_with_its_size_and_digest():
    raw = b'{"ts": 1, "node": "n"}'
    d = letter(raw)
    assert not d.payload_truncated and d.payload == raw.decode() and d.payload_encoding == "utf-8"
    assert d.payload_size == len(raw) and d.payload_sha256 == hashlib.sha256(raw).hexdigest()
    binary = letter(b"\xff\xfe binary")
    assert binary.payload_encoding == "base64" and binary.original_bytes() == b"\xff\xfe binary"


def test_utf8_text_is_cut_at_a_character_boundary():
    raw = ("é" * MAX_PAYLOAD_BYTES).encode()  # 2 bytes a character: the cut may fall inside one
    d = letter(raw[: MAX_PAYLOAD_BYTES + 1])
    assert d.payload_truncated and d.payload_encoding == "utf-8" and set(d.payload) == {"é"}
    assert len(d.payload.encode()) in (MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES - 1)
    bad_tail = b"a" * (MAX_PAYLOAD_BYTES - 1) + b"\xff" + b"a" * 10  # not UTF-8 where it is cut: base64
    assert letter(bad_tail).payload_encoding == "base64"


def test_reason_and_key_are_bounded():
    d = letter(b"x", reason="r" * 100_000, key="k" * 100_000)
    assert len(d.reason) == MAX_REASON and len(d.key) == MAX_KEY
    assert len(d.encoded()) < 5_000


def test_the_worst_case_fits_the_producer():
    d = letter(b"\xff" * 5_000_000, reason="r" * 10**6, key="k" * 10**6, stage="s" * 100)
    assert len(d.encoded()) < PRODUCER_LIMIT / 8
    assert json.loads(d.encoded())["payload_truncated"] is True
    assert base64.b64decode(d.payload) == b"\xff" * MAX_PAYLOAD_BYTES


class _Message:
    def __init__(self, value: bytes, key: bytes | None = b"gpu-node-1") -> None:
        self.topic, self.partition, self.offset, self.key, self.value = "t.telemetry", 1, 42, key, value


async def test_a_dead_letter_that_cannot_be_produced_is_counted_and_processing_goes_on(caplog):
    from tailhound.streams.intake import DeadLetters
    from tailhound.streams.intake_stats import IntakeStats

    async def broken(**_kw):
        raise RuntimeError("MessageSizeTooLargeError")

    stats = IntakeStats()
    letters = DeadLetters(broken, stats)
    assert await letters.publish(_Message(b"\xff" * 10), "bad", "decode", "not_utf8") is False
    assert stats.deadletter_failed == 1
    assert "could not produce the dead letter of t.telemetry[1]@42" in caplog.text


async def test_dead_letters_are_produced_bounded_and_keyed_like_the_message():
    from tailhound.streams.intake import DeadLetters
    from tailhound.streams.intake_stats import IntakeStats

    sent = []

    async def send(**kw):
        sent.append(kw)

    letters = DeadLetters(send, IntakeStats(), clock=lambda: 5.0)
    assert await letters.publish(_Message(b"\xff" * 2_000_000, key=b"k" * 10_000), "r" * 5000, "limits", "oversized")
    (kw,) = sent
    assert kw["key"] == b"k" * MAX_KEY and len(kw["value"]) < PRODUCER_LIMIT / 10
    d = DeadLetter.model_validate_json(kw["value"])
    assert (d.kind, d.stage, d.ts, d.partition, d.offset, d.payload_size) == (
        "oversized",
        "limits",
        5.0,
        1,
        42,
        2_000_000,
    )
