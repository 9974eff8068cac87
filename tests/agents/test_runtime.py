"""The agent runtime: schedules, gaps, collectors that turn off, labels, record -> replay identity."""

from __future__ import annotations

import asyncio
import logging

from tailhound.agents.collectors import CollectError, CollectorUnavailable
from tailhound.agents.collectors.nvml import NvmlCollector, NvmlConfig
from tailhound.agents.collectors.procnet import ProcNetCollector, ProcNetConfig
from tailhound.agents.collectors.scrape import ScrapeCollector, ScrapeTarget
from tailhound.agents.collectors.streamprobe import StreamProbeCollector, StreamProbeConfig
from tailhound.agents.config import AgentConfig
from tailhound.agents.render import ExpositionWriter
from tailhound.agents.runtime import Agent, replay
from tailhound.recording import ScrapeRecord, read_records
from tests.agents.fake_pynvml import FakeNvml
from tests.agents.sse_servers import ServerSpec, serve
from tests.http_helpers import FakeVllm, serve_metrics


class Scripted:
    """A collector that follows a script: a value, a CollectError, or an unexpected exception."""

    job = "node"

    def __init__(self, script, interval_s=0.05):
        self.script, self.interval_s, self.calls = list(script), interval_s, 0
        self.node = "n1"
        self.closed = False

    async def collect(self):
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if isinstance(step, BaseException):
            raise step
        w = ExpositionWriter()
        w.counter("node_netstat_TcpExt_ListenOverflows", step)
        return [ScrapeRecord(ts=1000 + self.calls, node="n1", job="node", body=w.text(), interval_s=1)]

    async def close(self):
        self.closed = True


async def test_failures_become_gap_snapshots_and_unexpected_errors_are_logged_once(caplog):
    snaps = []
    c = Scripted([1, CollectError("down"), RuntimeError("bug"), RuntimeError("bug"), 5, 7])
    agent = Agent(AgentConfig(listen=None, labels={"cluster": "c1"}), snaps.append, collectors=[c])
    for _ in range(6):
        await agent.collect_once(c)
    assert [s.error for s in snaps] == [None, "down", "bug", "bug", None, None]
    assert snaps[4].gap and not snaps[5].gap
    assert all(s.labels == {"cluster": "c1"} for s in snaps)
    [ov] = snaps[4].find("node_netstat_TcpExt_ListenOverflows")
    assert ov.delta == 4  # across the failed collections
    assert caplog.text.count("failed unexpectedly") == 1
    assert agent.metrics.collect_errors.labels("node")._value.get() == 3


async def test_unavailable_collector_is_turned_off_with_one_line(caplog):
    caplog.set_level(logging.WARNING)
    off = Scripted([CollectorUnavailable("nvml: no NVIDIA driver (NVML Shared Library Not Found); GPU collector off")])
    on = Scripted([1, 2, 3, 4, 5, 6, 7, 8])
    snaps = []
    agent = Agent(AgentConfig(listen=None), snaps.append, collectors=[off, on])
    await agent.run(duration_s=0.3)
    assert off.calls == 1 and on.calls >= 3
    assert caplog.text.count("no NVIDIA driver") == 1
    assert off.closed and on.closed
    assert agent.metrics.collectors_off._value.get() == 1


async def test_a_slow_collector_does_not_delay_others():
    class Slow(Scripted):
        async def collect(self):
            await asyncio.sleep(0.5)
            return await super().collect()

    slow, fast = Slow([1], interval_s=0.05), Scripted([1, 2, 3], interval_s=0.05)
    agent = Agent(AgentConfig(listen=None), lambda s: None, collectors=[slow, fast])
    await agent.run(duration_s=0.6)
    assert slow.calls <= 2 and fast.calls >= 8


async def test_record_then_replay_gives_identical_snapshots(tmp_path, monkeypatch):
    FakeNvml.fleet().install(monkeypatch)
    fixtures = tmp_path / "proc" / "net"
    fixtures.mkdir(parents=True)
    for name in ("netstat", "snmp", "sockstat"):
        src = __import__("pathlib").Path(__file__).parent / "fixtures" / f"proc_net_{name}.txt"
        (fixtures / name).write_text(src.read_text())
    fake = FakeVllm(restart_at=3)
    live = []
    out = tmp_path / "rec.jsonl"
    async with (
        serve_metrics(fake) as url,
        serve(ServerSpec(tokens=6, first_token_delay_s=0.01, token_gap_s=0.01)) as sse,
    ):
        collectors = [
            ScrapeCollector(ScrapeTarget(job="vllm", url=url, interval_s=0.1), node="gpu-1"),
            NvmlCollector(NvmlConfig(interval_s=0.1), node="gpu-1"),
            ProcNetCollector(ProcNetConfig(interval_s=0.1, proc_root=tmp_path / "proc"), node="gpu-1"),
            StreamProbeCollector(
                StreamProbeConfig(
                    endpoint=sse.url, name="chat", model="m", interval_s=0.2, health_samples=2, timeout_s=5
                )
            ),
        ]
        with out.open("w") as fh:
            agent = Agent(
                AgentConfig(listen=None, labels={"cluster": "c1"}), live.append, recorder=fh, collectors=collectors
            )
            await agent.run(duration_s=1.0)
    assert {s.source for s in live} == {"vllm", "nvml", "node", "streamprobe"}
    assert any(s.reset for snap in live for s in snap.samples if s.kind == "counter")  # the engine restarted
    replayed = []
    n = await replay(read_records(out), replayed.append)
    assert n == len(live) == agent.records
    assert replayed == live


def source_key(rec: ScrapeRecord) -> tuple:
    return rec.node, rec.job, tuple(sorted(rec.labels.items()))


async def test_failure_records_land_on_the_same_sources_as_data():
    from tailhound.agents.collectors.nginx import NginxCollector, NginxConfig
    from tailhound.agents.collectors.tcpconnect import TcpConnectCollector, TcpConnectConfig
    from tests.agents.sse_servers import closed_port_url

    port = int(closed_port_url().rsplit(":", 1)[1])
    tcp = TcpConnectCollector(
        TcpConnectConfig(
            targets=[{"name": "lb", "host": "127.0.0.1", "port": port, "labels": {"tier": "edge"}}], timeout_s=0.2
        ),
        node="n1",
    )
    data = await tcp.collect()
    assert [source_key(r) for r in tcp.failure_records(1.0, "x")] == [source_key(r) for r in data]
    async with serve(ServerSpec(tokens=4, first_token_delay_s=0.01, token_gap_s=0.01)) as sse:
        probe = StreamProbeCollector(
            StreamProbeConfig(endpoint=sse.url, name="chat", model="m", health_samples=1, labels={"region": "eu"})
        )
        data = await probe.collect()
        await probe.close()
    assert [source_key(r) for r in probe.failure_records(1.0, "x")] == [source_key(r) for r in data]

    def stub() -> str:
        return "Active connections: 1 \nserver accepts handled requests\n 1 1 1 \nReading: 0 Writing: 1 Waiting: 0 \n"

    async with serve_metrics(stub, path="/nginx_status") as url:
        nginx = NginxCollector(NginxConfig(url=url, worker_connections=10, labels={"lb": "a"}))
        data = await nginx.collect()
        await nginx.close()
    assert [source_key(r) for r in nginx.failure_records(1.0, "x")] == [source_key(r) for r in data]
    scrape = ScrapeCollector(ScrapeTarget(job="vllm", url="http://127.0.0.1:9/metrics"), node="n1")
    [failed] = scrape.failure_records(1.0, "x")
    assert source_key(failed) == ("n1", "vllm", (("instance", "127.0.0.1:9"),))


async def test_collectors_with_the_same_interval_share_their_ticks():
    loop = asyncio.get_running_loop()
    seen: dict[str, list[float]] = {"a": [], "b": []}

    class Timed(Scripted):
        def __init__(self, name, start_delay):
            super().__init__([1, 2, 3, 4, 5, 6, 7, 8, 9], interval_s=0.1)
            self.name, self.start_delay = name, start_delay

        async def collect(self):
            if not seen[self.name]:
                await asyncio.sleep(self.start_delay)  # the first collections do not start together
            seen[self.name].append(loop.time())
            return await super().collect()

    agent = Agent(AgentConfig(listen=None), lambda s: None, collectors=[Timed("a", 0.0), Timed("b", 0.037)])
    await agent.run(duration_s=0.45)
    ticks_a, ticks_b = seen["a"][1:], seen["b"][1:]
    assert len(ticks_a) >= 3 and len(ticks_b) >= 3
    for t in ticks_a + ticks_b:  # on the multiples of the interval of the loop's clock
        assert abs(t / 0.1 - round(t / 0.1)) < 0.2
    shared = {round(t / 0.1) for t in ticks_a} & {round(t / 0.1) for t in ticks_b}
    assert len(shared) >= 3  # both woke for the same ticks
