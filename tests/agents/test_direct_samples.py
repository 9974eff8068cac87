"""Native collectors hand their values to the pipeline without the text round trip; nothing else changes.

For the same collection, the families a :class:`CollectedRecord` gives the pipeline equal what parsing
its rendered text (what ``tailhound record`` writes) gives, and the snapshots built either way are
identical, to the byte of the published JSON, over several collections (deltas, resets, gaps).
"""

from __future__ import annotations

import asyncio
import json
import math
import stat
from pathlib import Path

import pytest

from tailhound.agents import wire
from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors.hops import HopsCollector, HopsConfig
from tailhound.agents.collectors.nginx import NginxCollector, NginxConfig
from tailhound.agents.collectors.nvml import NvmlCollector, NvmlConfig
from tailhound.agents.collectors.procnet import ProcNetCollector, ProcNetConfig
from tailhound.agents.collectors.streamprobe import StreamProbeCollector, StreamProbeConfig
from tailhound.agents.collectors.tcpconnect import TcpConnectCollector, TcpConnectConfig
from tailhound.agents.config import AgentConfig
from tailhound.agents.exposition import parse_exposition, to_samples
from tailhound.agents.render import ExpositionWriter
from tailhound.agents.runtime import Agent
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import CounterSample, GaugeSample, Snapshot
from tests.agents.fake_pynvml import FakeNvml
from tests.agents.sse_servers import ServerSpec, serve
from tests.http_helpers import serve_metrics

pytestmark = pytest.mark.timeout(60)
FIXTURES = Path(__file__).parent / "fixtures"
STUB = (
    "Active connections: 291 \nserver accepts handled requests\n 16630948 16630948 31070465 \n"
    "Reading: 6 Writing: 179 Waiting: 106 \n"
)


def wire_json(snap: Snapshot) -> bytes:
    return snap.model_dump_json(exclude_none=True).encode()


def assert_same_as_text(rounds: list[list]) -> int:
    """Each collected record: families == parsed text, and direct vs text snapshots identical."""
    direct, via_text = SnapshotBuilder(), SnapshotBuilder()
    n = 0
    for records in rounds:
        for rec in records:
            if not isinstance(rec, CollectedRecord):
                continue
            assert rec.families() == parse_exposition(rec.body)
            assert to_samples(rec.families()) == to_samples(parse_exposition(rec.body))
            a, b = direct.build(rec), via_text.build(rec.to_record())
            assert a == b and wire_json(a) == wire_json(b)
            assert Snapshot.model_validate_json(wire_json(a)) == a  # what the pipeline built is valid
            n += len(a.samples)
    return n


async def test_nvml_fleet(monkeypatch):
    fake = FakeNvml.fleet().install(monkeypatch)
    fake.gpus[1].clock_event_reasons = 0x60
    fake.gpus[4].nvlink_sleeping.add(3)
    c = NvmlCollector(NvmlConfig(), node="gpu-node-1")
    rounds = []
    try:
        for i in range(3):
            if i == 1:
                fake.inject_xid(4, 79)
                fake.gpus[3].lost = True
            if i == 2:
                fake.gpus[0].nvlink_tx_kib.clear()  # the counter went back: a reset
            rounds.append(await c.collect())
    finally:
        await c.close()
    assert assert_same_as_text(rounds) > 2000


async def test_procnet_tcp_connect_nginx_hops_and_stream_probe(tmp_path):
    proc = tmp_path / "proc" / "net"
    proc.mkdir(parents=True)
    for name in ("netstat", "snmp", "sockstat"):
        (proc / name).write_text((FIXTURES / f"proc_net_{name}.txt").read_text())
    mtr = tmp_path / "mtr"
    mtr.write_text(f"#!/bin/sh\ncat {FIXTURES / 'mtr_json.txt'}\n")
    mtr.chmod(mtr.stat().st_mode | stat.S_IXUSR)

    async def accept(_reader, writer):
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with (
        serve_metrics(lambda: STUB, path="/nginx_status") as nginx_url,
        serve(ServerSpec(tokens=6, first_token_delay_s=0.01, token_gap_s=0.01)) as sse,
    ):
        collectors = [
            ProcNetCollector(ProcNetConfig(proc_root=tmp_path / "proc"), node="n1"),
            TcpConnectCollector(
                TcpConnectConfig(
                    targets=[{"name": "lb", "host": "127.0.0.1", "port": port, "labels": {"tier": "edge"}}]
                ),
                node="n1",
            ),
            NginxCollector(NginxConfig(url=nginx_url, worker_connections=4096, labels={"lb": "a"})),
            HopsCollector(HopsConfig(targets=[{"name": "api", "host": "203.0.113.10"}], mtr_path=str(mtr)), node="n1"),
            StreamProbeCollector(
                StreamProbeConfig(endpoint=sse.url, name="chat", model="m", health_samples=5, lb_health_timeout_s=2)
            ),
        ]
        rounds = []
        try:
            for _ in range(3):
                rounds.append([rec for c in collectors for rec in await c.collect()])
        finally:
            for c in collectors:
                await c.close()
            server.close()
    assert {r.job for r in rounds[0]} == {"node", "netprobe", "streamprobe"}
    assert all(isinstance(r, CollectedRecord) for records in rounds for r in records)
    assert assert_same_as_text(rounds) > 100


def test_writer_edge_values_and_labels_parse_back_the_same():
    w = ExpositionWriter()
    w.gauge("g", -0.0, {"a": 'quote " back \\ slash', "b": "line\nbreak"}, help="with help")
    w.gauge("g", 7, {"a": 1})  # an int label value renders as str
    w.gauge("g", True, {"a": "t"})
    w.gauge("g", math.nan, {"a": "nan"})
    w.gauge("g", -math.inf, {"a": "inf"})
    w.gauge("g", 2**60 + 1, {"a": "big"})
    w.gauge("g", 0.1 + 0.2, {"a": "repr"})
    w.counter("c_total", 3, {})
    w.counter("c_total", -1, {"x": "negative counter: a gauge"})
    w.untyped("node_netstat_TcpExt_ListenOverflows", 12)
    w.histogram("h", [0.1, 1, 2.5], [1, 2, 2], 3, 4.5, {"x": "y"}, help="a histogram")
    w.histogram("h", [0.1, 1, 2.5], [0, 0, 0], 0, 0.0, {"x": "z"})
    w.histogram("bad", [1, 2], [3, 1], 3, 1.0)  # not cumulative: skipped with an error either way
    w.gauge("x" * 201, 1)  # too long a name: skipped with an error either way

    def comparable(families):  # NaN != NaN: compare the values' reprs
        return [(f.name, f.type, f.help, [(s.name, s.labels, repr(s.value)) for s in f.samples]) for f in families]

    assert comparable(w.families()) == comparable(parse_exposition(w.text()))
    direct_errors: list[str] = []
    text_errors: list[str] = []
    counters = {"node_netstat_TcpExt_ListenOverflows"}
    direct = to_samples(w.families(), counters=counters, errors=direct_errors)
    via_text = to_samples(parse_exposition(w.text()), counters=counters, errors=text_errors)
    assert direct == via_text and direct_errors == text_errors and len(direct_errors) == 2
    assert json.dumps([s.model_dump() for s in direct]) == json.dumps([s.model_dump() for s in via_text])
    assert [s.labels["a"] for s in direct if s.name == "g"] == ['quote " back \\ slash', "1", "t", "big", "repr"]
    assert next(s for s in direct if s.name == "g").value == 0.0  # -0.0 renders as 0


def test_writer_rejects_what_rendering_rejected():
    w = ExpositionWriter()
    with pytest.raises(TypeError):
        w.gauge("g", None)
    with pytest.raises(ValueError):
        w.histogram("h", [1, 2], [1], 1, 1.0)
    w.gauge("g", 1)
    with pytest.raises(ValueError):
        w.counter("g", 1)


def test_fast_constructors_equal_trusted_and_validated_samples():
    labels = {"gpu": "0", "link": "3"}
    pairs = [
        (
            wire.gauge("g", labels, 1.5),
            GaugeSample.trusted(name="g", labels=labels, value=1.5),
            GaugeSample(name="g", labels=labels, value=1.5),
        ),
        (
            wire.counter("c", labels, 2.0),
            CounterSample.trusted(name="c", labels=labels, value=2.0, delta=None, reset=False),
            CounterSample(name="c", labels=labels, value=2.0, delta=None, reset=False),
        ),
        (
            wire.counter("c", labels, 2.0, 1.0, True),
            CounterSample.trusted(name="c", labels=labels, value=2.0, delta=1.0, reset=True),
            CounterSample(name="c", labels=labels, value=2.0, delta=1.0, reset=True),
        ),
    ]
    for fast, trusted, validated in pairs:
        assert type(fast) is type(trusted)
        assert list(fast.__dict__.items()) == list(trusted.__dict__.items())
        assert fast.__pydantic_fields_set__ == trusted.__pydantic_fields_set__
        assert fast.__pydantic_extra__ is None and fast.__pydantic_private__ is None
        assert fast == trusted == validated and fast.model_dump_json() == validated.model_dump_json()
    one, two = wire.gauge("g", labels, 1.0), wire.gauge("g", labels, 1.0)
    assert one.__pydantic_fields_set__ is not two.__pydantic_fields_set__  # each sample owns its set


def test_snapshots_without_revalidating_samples_equal_validated_ones():
    w = ExpositionWriter()
    w.gauge("tailhound_gpu_temperature_celsius", 50, {"gpu": "0"})
    w.counter("tailhound_gpu_xid_errors_total", 1, {"gpu": "0"})
    w.histogram("tailhound_tcp_connect_duration_seconds", [0.001, 0.01], [1, 2], 2, 0.004, {"target": "lb"})
    builder = SnapshotBuilder()
    for ts in (100.0, 101.0):
        snap = builder.build(CollectedRecord(ts=ts, node="n1", job="nvml", writer=w, interval_s=1.0))
        fields = ("node", "source", "ts", "labels", "interval_s", "samples", "prev_ts", "gap")
        validated = Snapshot(**{k: snap.__dict__[k] for k in fields})  # how the pipeline built it before
        assert snap == validated and wire_json(snap) == wire_json(validated)
        assert snap.model_fields_set == validated.model_fields_set


async def test_recorder_writes_the_text_and_agent_labels_apply_to_both_kinds(tmp_path):
    class Native:
        job, interval_s, node = "nvml", 1.0, "n1"

        def __init__(self):
            self.n = 0

        async def collect(self):
            self.n += 1
            w = ExpositionWriter()
            w.counter("tailhound_gpu_xid_errors_total", self.n, {"gpu": "0"})
            return [
                CollectedRecord(
                    ts=1000.0 + self.n, node="n1", job="nvml", writer=w, labels={"own": "x"}, interval_s=1.0
                )
            ]

        async def close(self):
            pass

    out = tmp_path / "rec.jsonl"
    snaps = []
    with out.open("w") as fh:
        agent = Agent(
            AgentConfig(listen=None, labels={"cluster": "c1", "own": "agent"}),
            snaps.append,
            recorder=fh,
            collectors=[Native()],
        )
        for _ in range(2):
            await agent.collect_once(agent.collectors[0])
    lines = out.read_text().splitlines()
    recs = [ScrapeRecord.model_validate_json(line) for line in lines]
    assert [r.labels for r in recs] == [{"cluster": "c1", "own": "x"}] * 2
    assert recs[1].body == (
        '# TYPE tailhound_gpu_xid_errors_total counter\ntailhound_gpu_xid_errors_total{gpu="0"} 2\n'
    )
    assert lines[0] == recs[0].to_line()
    replayed = SnapshotBuilder()
    assert [replayed.build(r) for r in recs] == snaps
    assert snaps[1].labels == {"cluster": "c1", "own": "x"}
    assert next(snaps[1].find("tailhound_gpu_xid_errors_total")).delta == 1


def test_add_rows_is_the_same_as_one_call_per_value():
    rows = [
        ("gauge", "a", "help a", {"gpu": "0"}, 1),
        ("counter", "b_total", "", {"gpu": "0"}, 2.5),
        ("gauge", "a", "other help", {"gpu": "1"}, None),
        ("gauge", "a", "", {"gpu": "2", "x": 3}, -0.0),
        ("untyped", "c", "", None, 7),
    ]
    bulk, calls = ExpositionWriter(), ExpositionWriter()
    bulk.add_rows(rows)
    for type_, name, help_, labels, value in rows:
        if value is not None:
            getattr(calls, type_)(name, value, labels, help=help_)
    assert bulk.text() == calls.text() and bulk.families() == calls.families()
    with pytest.raises(ValueError):
        bulk.add_rows([("counter", "a", "", {}, 1)])


async def test_encode_snapshot_is_byte_identical_to_pydantic(monkeypatch):
    from tailhound.agents.wire import encode_snapshot
    from tests.http_helpers import FakeVllm

    FakeNvml.fleet().install(monkeypatch)
    c = NvmlCollector(NvmlConfig(), node="gpu-1")
    builder = SnapshotBuilder()
    snaps = []
    try:
        for _ in range(2):
            snaps += [builder.build(r) for r in await c.collect()]
    finally:
        await c.close()
    fake = FakeVllm(restart_at=2)
    for i in range(3):
        snaps.append(
            builder.build(
                ScrapeRecord(
                    ts=100.0 + i,
                    node="n1",
                    job="vllm",
                    body=fake.body(),
                    labels={"instance": 'a"b\\c', "samples": "[]"},
                    interval_s=1.0,
                )
            )
        )
    snaps.append(builder.build(ScrapeRecord(ts=200.0, node="n1", job="vllm", error='down: "x"', interval_s=1.0)))
    snaps.append(Snapshot(ts=1.0, node="n", source="nvml"))
    assert any(s.kind == "histogram" and s.delta is not None for snap in snaps for s in snap.samples)
    for snap in snaps:
        assert encode_snapshot(snap) == snap.model_dump_json(exclude_none=True).encode()
