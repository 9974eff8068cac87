from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from tailhound.agents.collectors import CollectError, Collector, CollectorUnavailable
from tailhound.agents.collectors import hops as hops_module
from tailhound.agents.collectors.hops import (
    HopsCollector,
    HopsConfig,
    HopTarget,
    parse_mtr_json,
    render_hops,
    route_signature,
)
from tailhound.agents.exposition import parse_exposition, to_samples

pytestmark = pytest.mark.timeout(60)
FIXTURES = Path(__file__).parent / "fixtures"
ROUTE_A = FIXTURES / "mtr_json.txt"
ROUTE_B = FIXTURES / "mtr_json_rerouted.txt"


def samples(body: str, name: str) -> list:
    return [s for s in to_samples(parse_exposition(body)) if s.name == name]


def fake_mtr(tmp_path: Path, script: str) -> str:
    path = tmp_path / "mtr"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_parse_mtr_095_json():
    hops = parse_mtr_json(ROUTE_A.read_text())
    assert [h.number for h in hops] == [1, 2, 3, 4, 5]
    assert [h.address for h in hops] == ["10.0.0.1", "198.51.100.1", "???", "198.51.100.77", "203.0.113.10"]
    first = hops[0]
    assert first.avg_s == pytest.approx(0.000288) and first.worst_s == pytest.approx(0.0003)
    assert first.loss_ratio == 0.0 and first.sent == 10
    assert hops[2].loss_ratio == 1.0 and not hops[2].answered
    assert hops[3].loss_ratio == pytest.approx(0.2) and hops[3].answered


def test_parse_mtr_092_json_with_string_counts():
    hops = parse_mtr_json((FIXTURES / "mtr_json_v092.txt").read_text())
    assert [(h.number, h.address) for h in hops] == [(1, "10.0.0.1"), (2, "203.0.113.10")]
    assert hops[1].avg_s == pytest.approx(0.00358)


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("not json", "not JSON"),
        ('{"report": {}}', "no report.hubs"),
        ('{"report": {"hubs": [{"count": 1}]}}', "hub 0 has no host"),
        ('{"report": {"hubs": [{"count": 1, "host": "a", "Avg": "fast"}]}}', "'Avg' is not a number"),
    ],
)
def test_parse_mtr_json_errors_name_the_problem(text, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_mtr_json(text)


def test_route_signature():
    a = parse_mtr_json(ROUTE_A.read_text())
    b = parse_mtr_json(ROUTE_B.read_text())
    sig = route_signature(a)
    assert len(sig) == 12 and int(sig, 16) >= 0
    assert sig == route_signature(list(reversed(a)))  # ordered by hop number, not list order
    assert sig != route_signature(b)


def test_render_hops_skips_rtt_of_silent_hops():
    target = HopTarget(name="api", host="203.0.113.10")
    body = render_hops(target, parse_mtr_json(ROUTE_A.read_text()), route_changes=0)
    rtt = {s.labels["hop"]: s for s in samples(body, "tailhound_hop_rtt_seconds")}
    assert set(rtt) == {"1", "2", "4", "5"}
    assert rtt["2"].labels == {"target": "api", "hop": "2", "address": "198.51.100.1"}
    assert rtt["5"].value == pytest.approx(0.003577)
    loss = {s.labels["hop"]: s.value for s in samples(body, "tailhound_hop_loss_ratio")}
    assert loss["3"] == 1.0 and loss["4"] == pytest.approx(0.2)
    assert samples(body, "tailhound_hop_loss_ratio")[2].labels["address"] == "???"
    assert samples(body, "tailhound_hop_count")[0].value == 5
    [info] = samples(body, "tailhound_route_info")
    assert info.value == 1 and info.labels["signature"] == route_signature(parse_mtr_json(ROUTE_A.read_text()))
    [changes] = samples(body, "tailhound_route_changes_total")
    assert changes.kind == "counter" and changes.value == 0


def test_config_validation():
    with pytest.raises(ValidationError):
        HopsConfig(targets=[{"name": "a", "host": "--inject"}])
    with pytest.raises(ValidationError):
        HopsConfig(targets=[{"name": "a", "host": "h"}], extra=1)
    cfg = HopsConfig(targets=[{"name": "a", "host": "h"}])
    assert (cfg.interval_s, cfg.cycles, cfg.mtr_path, cfg.timeout_s) == (60.0, 10, "mtr", 30.0)


async def test_unavailable_without_mtr_or_raw_sockets(monkeypatch):
    def no_raw(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(hops_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(hops_module.socket, "socket", no_raw)
    collector = HopsCollector(HopsConfig(targets=[{"name": "a", "host": "203.0.113.10"}]))
    with pytest.raises(CollectorUnavailable, match="needs mtr"):
        await collector.collect()


async def test_builtin_tracer_without_mtr_when_raw_sockets_permitted(monkeypatch):
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    except PermissionError:
        pytest.skip("opening a raw ICMP socket raised PermissionError (needs root or CAP_NET_RAW)")

    async def no_mtr(*args, **kwargs):
        raise AssertionError("mtr must not run")

    monkeypatch.setattr(hops_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(hops_module, "run_mtr", no_mtr)
    cfg = HopsConfig(
        targets=[{"name": "lo", "host": "127.0.0.1"}, {"name": "lo2", "host": "127.0.0.2"}], cycles=2, timeout_s=10
    )
    collector = HopsCollector(cfg, node="client-1")
    for _ in range(2):
        records = await collector.collect()
        # loopback targets are this machine: the agent's own node, told apart by the target label
        assert [(r.node, r.error, r.labels["target"]) for r in records] == [
            ("client-1", None, "lo"),
            ("client-1", None, "lo2"),
        ]
        for record, host in zip(records, ("127.0.0.1", "127.0.0.2"), strict=True):
            parse_exposition(record.body)
            [rtt] = samples(record.body, "tailhound_hop_rtt_seconds")
            assert rtt.labels["address"] == host and rtt.value > 0
            assert samples(record.body, "tailhound_hop_loss_ratio")[0].value == 0.0
            assert samples(record.body, "tailhound_hop_count")[0].value == 1
            assert samples(record.body, "tailhound_route_changes_total")[0].value == 0
    await collector.close()


async def test_fake_mtr_end_to_end_counts_route_changes(tmp_path):
    counter = tmp_path / "runs"
    mtr = fake_mtr(
        tmp_path,
        f"""echo "$@" > {tmp_path}/args
n=$(cat {counter} 2>/dev/null || echo 0)
echo $((n + 1)) > {counter}
if [ "$n" -eq 1 ]; then cat {ROUTE_B}; else cat {ROUTE_A}; fi
""",
    )
    cfg = HopsConfig(targets=[{"name": "api", "host": "203.0.113.10"}], mtr_path=mtr, cycles=7, timeout_s=10)
    collector = HopsCollector(cfg, node="client-1")
    assert isinstance(collector, Collector)
    rounds = [await collector.collect() for _ in range(4)]
    await collector.close()
    assert (tmp_path / "args").read_text().split() == ["--json", "-n", "-c", "7", "203.0.113.10"]
    [first] = rounds[0]
    assert first.job == "netprobe" and first.node == "203.0.113.10" and first.error is None
    assert first.labels == {"target": "api", "source": "client-1"}
    assert first.interval_s == 60.0
    changes = [samples(r[0].body, "tailhound_route_changes_total")[0].value for r in rounds]
    assert changes == [0, 1, 2, 2]  # A -> B -> A -> A
    sigs = [samples(r[0].body, "tailhound_route_info")[0].labels["signature"] for r in rounds]
    assert sigs[0] == sigs[2] == sigs[3] != sigs[1]
    rtt = {s.labels["hop"]: s.value for s in samples(rounds[1][0].body, "tailhound_hop_rtt_seconds")}
    assert rtt["2"] == pytest.approx(0.002017) and rtt["3"] == pytest.approx(0.02093)  # the 2 ms -> 20 ms jump


async def test_fake_mtr_timeout_kills_process(tmp_path):
    pidfile = tmp_path / "pid"
    mtr = fake_mtr(tmp_path, f"echo $$ > {pidfile}\nexec sleep 30\n")
    cfg = HopsConfig(targets=[{"name": "api", "host": "203.0.113.10"}], mtr_path=mtr, timeout_s=0.5)
    with pytest.raises(CollectError, match="timed out after 0.5s") as err:
        await HopsCollector(cfg).collect()
    assert not isinstance(err.value, CollectorUnavailable)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_one_failing_target_is_an_error_record(tmp_path):
    mtr = fake_mtr(tmp_path, f'if [ "$5" = "203.0.113.10" ]; then cat {ROUTE_A}; else echo "not json"; fi\n')
    cfg = HopsConfig(
        targets=[{"name": "good", "host": "203.0.113.10"}, {"name": "bad", "host": "192.0.2.1"}],
        mtr_path=mtr,
        timeout_s=10,
    )
    good, bad = await HopsCollector(cfg).collect()
    assert good.error is None and samples(good.body, "tailhound_hop_count")[0].value == 5
    assert bad.node == "192.0.2.1" and bad.body == "" and "not JSON" in bad.error


async def test_mtr_failures(tmp_path):
    denied = fake_mtr(tmp_path, 'echo "mtr: Failure to open IPv4 sockets: Operation not permitted" >&2\nexit 1\n')
    cfg = HopsConfig(targets=[{"name": "api", "host": "203.0.113.10"}], mtr_path=denied)
    with pytest.raises(CollectorUnavailable, match="cap_net_raw"):
        await HopsCollector(cfg).collect()
    broken = fake_mtr(tmp_path, 'echo "mtr: Name or service not known" >&2\nexit 1\n')
    cfg = HopsConfig(targets=[{"name": "api", "host": "203.0.113.10"}], mtr_path=broken)
    with pytest.raises(CollectError, match="Name or service not known"):
        await HopsCollector(cfg).collect()
