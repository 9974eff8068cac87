"""Label matchers are RE2 (linear time): a hostile pattern cannot freeze the worker, and what RE2 cannot
compile is refused when the matcher is parsed, naming it. Matching work per incident stays bounded:
silences have at most MAX_MATCHERS matchers, at most MAX_SILENCES are live, and the flush stage hands
the event loop back between groups."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from tailhound.errors import ConfigError
from tailhound.notifier.config import parse_config
from tailhound.notifier.limits import MAX_EXPIRED_SILENCES, MAX_MATCHERS, MAX_SILENCES
from tailhound.notifier.matchers import MAX_VALUE_CHARS, Matcher, MatcherSpans, matcher_spans
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.state import Silence

from .factories import T0, incident_event

EVIL = "(.|.)*Z"  # exponential for a backtracking engine on any value without a Z
NODE = "gpu-node-" + "a" * 25  # 34 characters, as in the incident


def silence(*matchers: str, **over) -> Silence:
    data = dict(
        matchers=list(matchers), starts_at=T0 - 60, ends_at=T0 + 3600, author="ana", comment="CHG-1", created_at=T0 - 60
    )
    data.update(over)
    return Silence(**data)


def test_the_regex_that_froze_the_worker_matches_in_linear_time():
    """In a child process with a deadline: with a backtracking engine this never returns."""
    code = (
        "import time; from tailhound.notifier.matchers import Matcher; t = time.perf_counter(); "
        f"m = Matcher.parse('node=~\"{EVIL}\"'); assert not m.matches({{'node': '{NODE}'}}); "
        "assert Matcher.parse('node!~\"(.|.)*Z\"').matches({'node': 'x' * 10000}); "
        "print(time.perf_counter() - t)"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"matching {EVIL} against a {len(NODE)}-character node name did not finish in 20 s")
    assert float(out.stdout.strip()) < 1.0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('node=~"(gpu)-\\\\1"', "invalid escape sequence"),  # a backreference
        ('node=~"gpu(?=-node)"', "invalid perl operator"),  # lookahead
        ('node=~"(?<!x)gpu"', "invalid perl operator"),  # lookbehind
        ('node=~"a{1001}"', "invalid repetition size"),
        ('node=~"(unclosed"', "missing )"),
    ],
)
def test_patterns_re2_cannot_compile_are_refused_naming_the_matcher(text, why):
    with pytest.raises(ValueError, match="invalid regular expression in matcher node=~") as err:
        Matcher.parse(text)
    assert why in str(err.value) and "RE2" in str(err.value)
    assert "\n" not in str(err.value)  # one clean line, not pydantic's wrapping


def test_a_matcher_given_as_an_object_is_checked_too():
    """The API takes matchers as objects as well; they were never compiled until an incident came."""
    with pytest.raises(ValidationError, match="invalid regular expression in matcher node=~"):
        Silence.model_validate(
            dict(
                matchers=[{"name": "node", "op": "=~", "value": "(a)\\1"}],
                starts_at=T0,
                ends_at=T0 + 60,
                author="a",
                comment="c",
                created_at=T0,
            )
        )


def test_bad_regex_in_the_notifier_config_names_file_line_and_matcher():
    with pytest.raises(
        ConfigError,
        match=r"n\.yaml:5:18: route\.routes\[0\]\.matchers\[0\]: "
        r".*invalid regular expression in matcher "
        r"node=~\"x\(\?=y\)\": invalid perl operator",
    ):
        parse_config(
            "route:\n  receiver: c\n  routes:\n    - receiver: c\n"
            "      matchers: ['node=~\"x(?=y)\"']\nreceivers: [{type: console, name: c}]\n",
            "n.yaml",
        )


def test_re2_semantics_fully_anchored_like_alertmanager():
    m = Matcher.parse('node=~"gpu-node-(7|8)"')
    assert m.matches({"node": "gpu-node-7"}) and not m.matches({"node": "gpu-node-77"})
    assert not m.matches({"node": "xgpu-node-7"})
    assert Matcher.parse('severity!~"info|warning"').matches({"severity": "critical"})
    assert Matcher.parse('node=~".*"').matches({})  # a missing label is the empty string
    assert Matcher.parse('model=~"llama-.*-70b"').matches({"model": "llama-3-70b"})
    assert Matcher.parse('node=~"gpu-node-\\\\d+"').matches({"node": "gpu-node-12"})


def test_matcher_values_are_bounded():
    Matcher.parse('node="' + "a" * MAX_VALUE_CHARS + '"')
    with pytest.raises(ValueError, match="more than"):
        Matcher.parse('node="' + "a" * (MAX_VALUE_CHARS + 1) + '"')
    with pytest.raises(ValueError, match="more than"):
        Matcher.parse("x" * 100_000)


def test_silence_bounds():
    silence(*['node="a"'] * MAX_MATCHERS)
    with pytest.raises(ValidationError, match=f"at most {MAX_MATCHERS}"):
        silence(*['node="a"'] * (MAX_MATCHERS + 1))
    with pytest.raises(ValidationError, match="comment has 1025 bytes"):
        silence('node="a"', comment="x" * 1025)
    with pytest.raises(ValidationError, match="author has"):
        silence('node="a"', author="é" * 600)  # 1200 bytes in UTF-8
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValidationError):
            silence('node="a"', ends_at=bad)
    with pytest.raises(ValidationError, match="at most 30 days"):
        silence('node="a"', ends_at=T0 + 31 * 86400)
    with pytest.raises(ValidationError, match="characters together"):
        silence(*[f'node=~"{"a" * 1000}"'] * 5)
    with pytest.raises(ValidationError, match="too complex together: 8004 RE2 instructions"):
        silence('node=~".{1000}"')  # short to write, 8,004 instructions (and ~180 KB) once compiled


def test_hostile_silences_at_the_limits_keep_matching_bounded():
    """MAX_SILENCES silences of MAX_MATCHERS hostile regexes, each built so that every matcher but the
    last matches (no short cut): one incident is still matched in well under a second."""
    nf = Notifier(
        parse_config(
            "grouping: {by: [incident], wait: 0s}\nroute: {receiver: c}\nreceivers: [{type: console, name: c}]\n"
        )
    )
    matchers = ['node=~"(.|.)*a"'] * (MAX_MATCHERS - 1) + [f'node=~"{EVIL}"']
    for i in range(MAX_SILENCES):
        s = silence(*matchers, id=f"sil-evil-{i}")
        nf.silences[s.id] = s
    nf.ingest([incident_event(node=NODE)], T0)
    t = time.perf_counter()
    out = nf.flush(T0)
    took = time.perf_counter() - t
    assert [n.kind for n in out.created] == ["opened"]  # none of them matches: paged
    assert took < 2.0, f"one incident against {MAX_SILENCES}x{MAX_MATCHERS} matchers took {took:.2f}s"


def test_flush_in_time_slices_gives_the_same_notifications():
    cfg = parse_config(
        "grouping: {by: [incident], wait: 0s}\nroute: {receiver: c}\nreceivers: [{type: console, name: c}]\n"
    )
    events = [incident_event(incident_id=f"inc-{i:04d}", node=f"gpu-node-{i}") for i in range(300)]
    whole, sliced = Notifier(cfg), Notifier(cfg)
    whole.ingest(events, T0)
    sliced.ingest(events, T0)
    expected = whole.flush(T0).created
    created, calls = [], 0
    while True:
        calls += 1
        out = sliced.flush(T0, slice_s=0.0)  # one group a call: the least the loop can be held
        created.extend(out.created)
        if not out.more:
            break
    assert calls == 300
    assert [n.idempotency_key for n in created] == [n.idempotency_key for n in expected]


def test_restore_skips_silence_records_beyond_the_bounds():
    cfg = parse_config("route: {receiver: c}\nreceivers: [{type: console, name: c}]\n")
    ok = silence('node="a"', id="sil-ok")
    items = {
        "silence:sil-ok": ok.model_dump(mode="json"),
        "silence:sil-big": dict(ok.model_dump(mode="json"), id="sil-big", comment="x" * 100_000),
        "silence:sil-evil": dict(ok.model_dump(mode="json"), id="sil-evil", matchers=['node=~"(a)\\\\1"']),
    }
    nf = Notifier.restore(cfg, items, now=T0)
    assert set(nf.silences) == {"sil-ok"}


def test_live_silences_are_capped_and_expired_ones_forgotten_oldest_first():
    cfg = parse_config("route: {receiver: c}\nreceivers: [{type: console, name: c}]\n")
    items = {
        f"silence:sil-{i}": silence('node="a"', id=f"sil-{i}").model_dump(mode="json") for i in range(MAX_SILENCES + 5)
    }
    nf = Notifier.restore(cfg, items, now=T0)
    assert nf.live_silences(T0) == MAX_SILENCES
    assert not nf.accepts_silence(silence('node="b"'), T0)
    for i in range(MAX_EXPIRED_SILENCES + 10):  # expired history is bounded too
        s = silence('node="a"', id=f"sil-old-{i}", expired_at=T0 - 50 + i * 0.001)
        nf.silences[s.id] = s
    out = nf.flush(T0)
    expired = [s for s in nf.silences.values() if s.state(T0) == "expired"]
    assert len(expired) == MAX_EXPIRED_SILENCES
    assert "sil-old-0" not in nf.silences and f"sil-old-{MAX_EXPIRED_SILENCES + 9}" in nf.silences
    assert out.dirty["silence:sil-old-0"] is None  # a tombstone on the state topic


def test_matcher_spans_point_at_the_name_and_the_value_as_written():
    assert matcher_spans('  severity=~"warn\\\\.|crit"') == MatcherSpans(name=2, value=13, raw_value="warn\\\\.|crit")
    assert matcher_spans("node!=gpu-3") == MatcherSpans(name=0, value=6, raw_value="gpu-3")
    assert matcher_spans('node="x"' + " " * 3000) is None and matcher_spans("no operator") is None
