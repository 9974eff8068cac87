"""HA pairs: two Prometheus servers (external labels ``replica: a`` / ``replica: b``, same ``cluster``) scrape the
same targets a few hundred ms apart and both remote-write them; the receiver takes one replica per cluster.

The snapshots are those of one replica alone (no doubles, no late samples), without the replica label; when the
accepted replica falls silent for ``failover_s`` the other one is accepted and the same sources go on (the
builder's deltas continue); series without the replica label pass; each cluster elects its own replica; the
tracker remembers at most ``max_clusters`` clusters; ``ha_dropped_series`` and ``ha_failovers`` are counted (and
reach the service's metrics).
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from tailhound.ingest.config import IngestServiceConfig
from tailhound.ingest.ha_dedup import HaConfig, HaTracker
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tailhound.ingest.remote_write import Series, encode_write_request, series_from_exposition
from tailhound.ingest.service import IngestService
from tailhound.settings import Settings
from tailhound.snapshot import Snapshot

from .capture_fixture import grow
from .prometheus_view import HEADERS

PAGE = (Path(__file__).parents[1] / "agents" / "fixtures" / "vllm_v1.prom").read_text()
T0 = 1_767_225_600.0
EVERY = 15.0
#: the replicas' scrape offsets within a round: b scrapes 300 ms after a (the same targets, so the same counters)
OFFSET = {"a": 0.1, "b": 0.4}
GROUPING = {"common_labels": ("instance", "node", "cluster"), "settle_s": 5.0}
HA = HaConfig(failover_s=30)
N_SERIES = len(series_from_exposition(PAGE, {}, 1).series)  # the page's series and `up`


def target(replica: str | None, cluster: str | None = "c1", node: str = "gpu-node-1") -> dict[str, str]:
    out = {"job": "vllm", "instance": f"{node}:8000", "node": node}
    if cluster is not None:
        out["cluster"] = cluster
    if replica is not None:
        out["replica"] = replica
    return out


def at(k: int, replica: str = "a") -> float:
    """When `replica` scrapes in round `k` (unix seconds)."""
    return T0 + k * EVERY + OFFSET[replica]


def scrape(
    k: int, replica: str | None, cluster: str | None = "c1", node: str = "gpu-node-1", stamp: str | None = None
) -> list[Series]:
    """What a replica stores of round `k`'s scrape (`stamp`: whose timestamp, default the replica's)."""
    ts = at(k, stamp or replica or "a")
    return series_from_exposition(grow(PAGE, k), target(replica, cluster, node), round(ts * 1000)).series


def body(*scrapes: list[Series], metadata: bool = True) -> bytes:
    meta = series_from_exposition(PAGE, {}, 1).metadata if metadata else ()
    return encode_write_request([s for sc in scrapes for s in sc], meta)


def receiver(ha: HaTracker | None) -> RemoteWriteIngest:
    return RemoteWriteIngest(IngestConfig(grouping=GROUPING), ha=ha)


def send(ingest: RemoteWriteIngest, payload: bytes, now: float) -> list[Snapshot]:
    result = ingest.accept(payload, HEADERS, now=now)
    assert result.status == 204 and result.rejects == [], result
    return result.snapshots


def alone(rounds: range, replica: str = "a", cluster: str = "c1", node: str = "gpu-node-1") -> list[Snapshot]:
    """The snapshots of one Prometheus without the replica label (no HA pair) sending `replica`'s scrapes."""
    ingest = receiver(None)
    out: list[Snapshot] = []
    for k in rounds:
        out += send(ingest, body(scrape(k, None, cluster, node, stamp=replica)), now=at(k, replica) + 1)
    return out + ingest.close().snapshots


def labels_of(snaps: list[Snapshot]) -> set[str]:
    return {k for s in snaps for k in s.labels} | {k for s in snaps for x in s.samples for k in x.labels}


def test_both_replicas_send_the_same_scrapes_and_only_the_first_ones_are_grouped():
    ha = HaTracker(HA)
    ingest = receiver(ha)
    got: list[Snapshot] = []
    for k in range(6):  # each round: a's request, then b's (300 ms later, the same counters)
        got += send(ingest, body(scrape(k, "a")), now=at(k, "a") + 1)
        got += send(ingest, body(scrape(k, "b")), now=at(k, "b") + 1)
    got += ingest.close().snapshots
    assert ha.elected("c1") == "a"
    assert [s.model_dump() for s in got] == [s.model_dump() for s in alone(range(6))]
    assert [s.ts for s in got] == [at(k, "a") for k in range(6)]
    assert "replica" not in labels_of(got) and {s.labels["cluster"] for s in got} == {"c1"}
    assert ingest.grouper.stats.get("late_samples", 0) == 0
    assert ha.stats == {"ha_dropped_series": 6 * N_SERIES}  # every series of b, no fail-over


def test_a_replica_silent_for_failover_s_hands_over_and_the_same_source_goes_on():
    ha = HaTracker(HA)
    ingest = receiver(ha)
    got: list[Snapshot] = []
    for k in range(4):
        got += send(ingest, body(scrape(k, "a")), now=at(k, "a") + 1)
        got += send(ingest, body(scrape(k, "b")), now=at(k, "b") + 1)
    # a dies after round 3: b's round 4 comes 15.3 s after a's last request (< failover_s: dropped), its round 5
    # 30.3 s after (>= failover_s: b is accepted)
    got += send(ingest, body(scrape(4, "b")), now=at(4, "b") + 1)
    assert ha.elected("c1") == "a" and ha.stats == {"ha_dropped_series": 5 * N_SERIES}
    for k in range(5, 8):
        got += send(ingest, body(scrape(k, "b")), now=at(k, "b") + 1)
    assert ha.elected("c1") == "b" and ha.stats == {"ha_dropped_series": 5 * N_SERIES, "ha_failovers": 1}
    # a comes back: b is the accepted one now (and sends), so a is dropped: no double, nothing late
    got += send(ingest, body(scrape(8, "a")), now=at(8, "a") + 1)
    got += send(ingest, body(scrape(8, "b")), now=at(8, "b") + 1)
    got += ingest.close().snapshots
    assert ha.stats == {"ha_dropped_series": 6 * N_SERIES, "ha_failovers": 1}
    assert ingest.grouper.stats.get("late_samples", 0) == 0

    assert [s.ts for s in got] == [at(k, "a") for k in range(4)] + [at(k, "b") for k in range(5, 9)]
    assert {(s.node, s.source, tuple(sorted(s.labels.items()))) for s in got} == {
        ("gpu-node-1", "vllm", (("cluster", "c1"), ("instance", "gpu-node-1:8000"), ("node", "gpu-node-1")))
    }
    assert "replica" not in labels_of(got)
    last_a, first_b = got[3], got[4]
    assert first_b.prev_ts == last_a.ts and first_b.error is None  # the same source: the builder's state goes on
    tokens = next(first_b.find("vllm:prompt_tokens_total"))
    assert tokens.delta == 200.0 and not tokens.reset  # two rounds of growth: rounds 4 and 5
    ttft = next(first_b.find("vllm:time_to_first_token_seconds"))
    assert ttft.delta is not None and ttft.delta.count == 4
    assert all(next(s.find("vllm:prompt_tokens_total")).delta == 100.0 for s in got[5:])


def test_series_without_the_replica_label_pass():
    ha = HaTracker(HA)
    ingest = receiver(ha)
    got: list[Snapshot] = []
    for k in range(3):
        # one Prometheus outside any pair (no replica label), and the pair's b, in the same request as a's
        plain = scrape(k, None, "c1", "gpu-node-9", stamp="b")
        got += send(ingest, body(scrape(k, "a"), plain), now=at(k, "a") + 1)
        got += send(ingest, body(scrape(k, "b")), now=at(k, "b") + 1)
    got += ingest.close().snapshots
    assert sorted((s.node, s.ts) for s in got) == sorted(
        [("gpu-node-1", at(k, "a")) for k in range(3)] + [("gpu-node-9", at(k, "b")) for k in range(3)]
    )
    nine = [s.model_dump() for s in got if s.node == "gpu-node-9"]
    assert nine == [s.model_dump() for s in alone(range(3), "b", node="gpu-node-9")]
    assert ha.stats == {"ha_dropped_series": 3 * N_SERIES} and ha.elected("c1") == "a"
    assert ha.filter(scrape(0, None), now=0) == scrape(0, None)  # unchanged, even long before anything


def test_each_cluster_elects_its_own_replica_and_fails_over_alone():
    ha = HaTracker(HA)
    ingest = receiver(ha)
    got: list[Snapshot] = []
    for k in range(6):
        # c1: a sends first; c2 (another pair, other nodes): b sends first
        a_series = scrape(k, "a", "c1", "gpu-node-1") + scrape(k, "a", "c2", "gpu-node-2")
        b_series = scrape(k, "b", "c1", "gpu-node-1") + scrape(k, "b", "c2", "gpu-node-2")
        if k == 0:
            got += send(ingest, body(scrape(k, "b", "c2", "gpu-node-2")), now=at(k, "a"))
            b_series = scrape(k, "b", "c1", "gpu-node-1")
        if k >= 2:  # a of c1 falls silent from round 2 (a of c2 goes on, dropped)
            a_series = scrape(k, "a", "c2", "gpu-node-2")
        got += send(ingest, body(a_series), now=at(k, "a") + 1)
        got += send(ingest, body(b_series), now=at(k, "b") + 1)
    got += ingest.close().snapshots
    assert (ha.elected("c1"), ha.elected("c2")) == ("b", "b")
    assert ha.stats["ha_failovers"] == 1  # c1 only (its a silent from round 2: b accepted in round 3)
    c1 = [s for s in got if s.labels["cluster"] == "c1"]
    c2 = [s for s in got if s.labels["cluster"] == "c2"]
    assert [s.ts for s in c1] == [at(0, "a"), at(1, "a"), at(3, "b"), at(4, "b"), at(5, "b")]
    assert [s.model_dump() for s in c2] == [s.model_dump() for s in alone(range(6), "b", "c2", "gpu-node-2")]
    # dropped: c1's b in rounds 0-2, c2's a in every round
    assert ha.stats["ha_dropped_series"] == (3 + 6) * N_SERIES
    assert ingest.grouper.stats.get("late_samples", 0) == 0


def test_max_clusters_bounds_memory_forgetting_the_least_recently_seen():
    ha = HaTracker(HA.model_copy(update={"max_clusters": 2}))

    def up(cluster: str, replica: str) -> list[Series]:
        return series_from_exposition("", target(replica, cluster), 1).series

    assert len(ha.filter(up("c1", "a"), now=0)) == 1
    assert len(ha.filter(up("c2", "a"), now=1)) == 1
    assert ha.filter(up("c1", "b"), now=2) == []  # c1 seen again (b dropped): c2 is the least recently seen
    assert len(ha.filter(up("c3", "a"), now=3)) == 1
    assert len(ha._elected) == 2 and ha.elected("c2") is None
    assert (ha.elected("c1"), ha.elected("c3")) == ("a", "a")
    # c2 comes back: a new election (whoever sends first), not a fail-over
    assert len(ha.filter(up("c2", "b"), now=4)) == 1 and ha.elected("c2") == "b"
    assert len(ha._elected) == 2 and ha.elected("c1") is None
    many = HaTracker(HA.model_copy(update={"max_clusters": 10}))
    for i in range(1000):
        many.filter(up(f"c{i}", "a"), now=i)
    assert len(many._elected) == 10 and many.elected("c999") == "a" and many.elected("c0") is None
    assert ha.stats == {"ha_dropped_series": 1} and many.stats == {}


class NoSender:
    """The publisher's part the receiver reads (its backlog); nothing is sent here."""

    outbox: list = []


def test_the_service_counts_dropped_series_and_failovers_in_its_stats_and_metrics():
    config = IngestServiceConfig.model_validate(
        {
            "listen": "127.0.0.1:0",
            "remote_write": {"grouping": GROUPING},
            "ha": {"failover_s": 30},
            "auth": {"bearer_token_env": None},
        }
    )
    service = IngestService(Settings(broker="kafka://127.0.0.1:9", topic_prefix="t."), config, sender=NoSender())  # type: ignore[arg-type]
    try:
        rw = service.receiver
        assert rw.ha is service.ha and service.ha is not None
        for k in range(2):
            send(rw, body(scrape(k, "a")), now=at(k, "a") + 1)
            send(rw, body(scrape(k, "b")), now=at(k, "b") + 1)
        for k in range(2, 5):  # a silent: b accepted from round 3
            send(rw, body(scrape(k, "b")), now=at(k, "b") + 1)
        stats = service.stats()
        assert (stats["ha_dropped_series"], stats["ha_failovers"]) == (3 * N_SERIES, 1)
        text = generate_latest(service.metrics.registry).decode()
        assert f'tailhound_ingest_events_total{{event="ha_dropped_series"}} {3 * N_SERIES}.0' in text
        assert 'tailhound_ingest_events_total{event="ha_failovers"} 1.0' in text
    finally:
        service._thread.shutdown(wait=False)
