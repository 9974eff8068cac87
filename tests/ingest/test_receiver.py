"""RemoteWriteIngest: HTTP statuses, back-pressure, dead letters, and snapshots equal to the agent's.

The agent scrapes a page and builds a snapshot (SnapshotBuilder on a ScrapeRecord); here Prometheus scrapes
the same page and remote-writes it. Both must give the same snapshots: the pages of tests/agents/fixtures
encoded as Prometheus stores them, and the requests a real Prometheus 2.42 sent (tests/ingest/fixtures).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import cramjam
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.deadletter import DeadLetter
from tailhound.ingest import receiver as receiver_module
from tailhound.ingest.grouping import TARGET_DOWN
from tailhound.ingest.receiver import IngestConfig, Reject, RemoteWriteIngest
from tailhound.ingest.remote_write import Series, decode_write_request, encode_write_request, series_from_exposition
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import Snapshot, SnapshotLimits

from .capture_fixture import VLLM_DOWN, grow, page

FIXTURES = Path(__file__).parent / "fixtures"
AGENT_FIXTURES = Path(__file__).parents[1] / "agents" / "fixtures"
HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "Prometheus/2.42.0",
}
T0 = 1_700_000_000_000
NODE = "gpu-node-2"
INSTANCE = "10.0.0.7:9400"
JOBS = {
    "blackbox": "blackbox",
    "dcgm": "dcgm",
    "nim": "nim",
    "node": "node",
    "sglang": "sglang",
    "tgi": "tgi",
    "vllm": "vllm",
}
PAGES = sorted(p.name for p in AGENT_FIXTURES.glob("*.prom") if p.name != "prometheus3_utf8.prom")
#: pages with counters that neither the catalog nor their names (`_total`) make counters: without the metadata
#: Prometheus sends (every minute), they are gauges until it comes
UNMAPPED_COUNTERS = {"dcgm_exporter.prom", "dcgm_exporter_legacy.prom", "tgi_v3.prom"}


def job_of(page_name: str) -> str:
    return next(job for prefix, job in JOBS.items() if page_name.startswith(prefix))


def ordered(snap: Snapshot) -> Snapshot:
    """The snapshot with its samples in one order (Prometheus does not keep the page's order)."""
    return snap.model_copy(update={"samples": sorted(snap.samples, key=lambda s: (s.name, sorted(s.labels.items())))})


def agent_snapshots(
    pages: list[str | None], job: str, labels: dict[str, str], stamps: list[float], interval_s: float
) -> list[Snapshot]:
    builder = SnapshotBuilder()
    return [
        builder.build(
            ScrapeRecord(
                ts=ts,
                node=NODE,
                job=job,
                labels=labels,
                interval_s=interval_s,
                **({"body": text} if text is not None else {"error": "HTTP 503"}),
            )
        )
        for text, ts in zip(pages, stamps, strict=True)
    ]


def ingest_snapshots(
    pages: list[str | None], job: str, interval_s: float, metadata: bool = True, ingest: RemoteWriteIngest | None = None
) -> list[Snapshot]:
    """What the ingest makes of Prometheus scraping `pages` (None: the scrape failed) every `interval_s`."""
    target = {"job": job, "instance": INSTANCE, "node": NODE}
    ingest = ingest or RemoteWriteIngest(
        IngestConfig(grouping={"common_labels": ("instance", "node"), "interval_s": {job: interval_s}})
    )
    out: list[Snapshot] = []
    previous: list[Series] = []
    for k, text in enumerate(pages):
        ts = T0 + int(k * interval_s * 1000)
        if text is None:
            stored = series_from_exposition("", target, ts, up=False, stale=[s for s in previous if s.name != "up"])
        else:
            stored = series_from_exposition(text, target, ts)
            previous = stored.series
        body = encode_write_request(stored.series, stored.metadata if metadata else ())
        result = ingest.accept(body, HEADERS, now=k * interval_s)
        assert (result.status, result.rejects) == (204, [])
        out += result.snapshots
    out += ingest.close().snapshots
    return out


def scrapes_of(text: str) -> list[str | None]:
    """Four scrapes of a page: growing, failed, restarted (every counter lower)."""
    return [grow(text, 0), grow(text, 1), None, grow(text, 0, restarted=True)]


# -- the same snapshots as the agent's ----------------------------------------------------------------------


@pytest.mark.parametrize("page_name", PAGES)
def test_snapshots_equal_the_agents_for_every_fixture_page(page_name):
    pages = scrapes_of((AGENT_FIXTURES / page_name).read_text())
    job = job_of(page_name)
    stamps = [(T0 + k * 5000) / 1000 for k in range(len(pages))]
    agent = agent_snapshots(pages, job, {"instance": INSTANCE, "node": NODE}, stamps, 5.0)
    got = ingest_snapshots(pages, job, 5.0)
    assert len(got) == len(agent) == 4
    for a, g in zip(agent, got, strict=True):
        if a.error is not None:
            assert g.error == TARGET_DOWN and g.gap and not g.samples
            continue
        assert ordered(g) == ordered(a)
    assert got[1].samples and got[3].gap  # deltas after the first scrape; the scrape after the failure is a gap
    if any(s.kind != "gauge" for s in got[1].samples):
        assert any(s.delta is not None for s in got[1].samples if s.kind != "gauge")


@pytest.mark.parametrize("page_name", PAGES)
def test_without_metadata_only_unmapped_counters_differ(page_name):
    pages = scrapes_of((AGENT_FIXTURES / page_name).read_text())
    job = job_of(page_name)
    agent = agent_snapshots(
        pages, job, {"instance": INSTANCE, "node": NODE}, [(T0 + k * 5000) / 1000 for k in range(4)], 5.0
    )
    got = ingest_snapshots(pages, job, 5.0, metadata=False)
    catalog = default_catalog()
    differing = set()
    for a, g in zip(agent, got, strict=True):
        if a.error is not None:
            continue
        mine = {(s.name, tuple(sorted(s.labels.items()))): s for s in g.samples}
        assert set(mine) == {(s.name, tuple(sorted(s.labels.items()))) for s in a.samples}
        for s in a.samples:
            other = mine[(s.name, tuple(sorted(s.labels.items())))]
            if other != s:
                assert (s.kind, other.kind, other.value) == ("counter", "gauge", s.value)
                assert catalog.kind_of(job, s.name) is None and not s.name.endswith("_total")
                differing.add(s.name)
    assert bool(differing) == (page_name in UNMAPPED_COUNTERS)


def test_a_page_repeating_a_series_keeps_it_once_as_prometheus_does():
    text = (AGENT_FIXTURES / "prometheus3_utf8.prom").read_text()
    (snap,) = ingest_snapshots([text], "vllm", 5.0)
    (agent,) = agent_snapshots([text], "vllm", {"instance": INSTANCE, "node": NODE}, [T0 / 1000], 5.0)
    assert len(agent.samples) == 10 and len(snap.samples) == 7  # the page repeats one series 4 times
    assert {(s.name, tuple(sorted(s.labels.items()))) for s in snap.samples} == {
        (s.name, tuple(sorted(s.labels.items()))) for s in agent.samples
    }


# -- what a real Prometheus sent ----------------------------------------------------------------------------


def replay(folder: Path, skip: tuple[str, ...] = (), **grouping) -> tuple[RemoteWriteIngest, list[Snapshot]]:
    capture = json.loads((folder / "capture.json").read_text())
    ingest = RemoteWriteIngest(IngestConfig(grouping={"common_labels": ("instance", "node", "cluster"), **grouping}))
    snaps: list[Snapshot] = []
    for i, entry in enumerate(capture["requests"]):
        if entry["file"] in skip:
            continue
        result = ingest.accept((folder / entry["file"]).read_bytes(), entry["headers"], now=float(i))
        assert (result.status, result.rejects) == (204, [])
        snaps += result.snapshots
    return ingest, snaps + ingest.close().snapshots


def test_prometheus_payloads_give_the_agents_snapshots_of_the_same_pages():
    ingest, snaps = replay(FIXTURES, interval_s={"vllm": 1.0, "dcgm": 1.0})
    assert ingest.stats["status_204"] == 21 and ingest.grouper.stats.get("late_samples", 0) == 0
    for job in ("vllm", "dcgm"):
        got = [s for s in snaps if s.source == job]
        assert len(got) == 14
        assert [s.ts for s in got] == sorted(s.ts for s in got)
        labels = got[0].labels
        assert labels["node"] == NODE and labels["cluster"] == "lab" and labels["instance"].startswith("127.0.0.1:")
        pages = [None if job == "vllm" and k in VLLM_DOWN else page(job, k) for k in range(14)]
        agent = agent_snapshots(pages, job, labels, [s.ts for s in got], 1.0)
        for k, (a, g) in enumerate(zip(agent, got, strict=True)):
            if a.error is not None:
                assert (g.error, g.gap, g.samples, g.prev_ts) == (TARGET_DOWN, True, [], a.prev_ts), k
            else:
                assert ordered(g) == ordered(a), k
    vllm = [s for s in snaps if s.source == "vllm"]
    assert len(vllm[0].samples) == 7 and next(vllm[1].find("vllm:prompt_tokens_total")).delta == 100.0
    assert len(vllm[3].samples) == 6  # the "length" series went stale
    restarted = vllm[7]
    assert restarted.gap and all(s.reset for s in restarted.samples if s.kind != "gauge")
    dcgm = [s for s in snaps if s.source == "dcgm"]
    assert not any(s.name == "DCGM_FI_DEV_MEMORY_TEMP" for s in dcgm[0].samples)  # the NOT_SUPPORTED sentinel


def test_the_interval_is_estimated_from_a_real_capture():
    _, snaps = replay(FIXTURES)
    vllm = [s for s in snaps if s.source == "vllm"]
    assert vllm[0].interval_s is None and {s.interval_s for s in vllm[1:]} == {1.0}


def test_a_batch_prometheus_dropped_is_a_gap_and_a_resent_batch_is_no_duplicate():
    # probe/007.bin was answered 429 (Prometheus dropped it), probe/011.bin 503 (resent as probe/012.bin)
    ingest, snaps = replay(FIXTURES / "probe", skip=("007.bin", "011.bin"))
    dropped = {
        (dict(s.labels)["job"], ts)
        for s in decode_write_request((FIXTURES / "probe" / "007.bin").read_bytes()).series
        for ts, _ in s.samples
    }
    assert len(dropped) == 2  # one scrape of each target
    for job, ms in dropped:
        after = min((s for s in snaps if s.source == job and s.ts > ms / 1000), key=lambda s: s.ts)
        assert after.gap and round(after.ts - after.prev_ts) == 2  # (for vLLM, the failed scrape that came next)
        assert all(not s.gap for s in snaps if s.source == job and s.ts < ms / 1000)
    assert len({(s.source, s.ts) for s in snaps}) == len(snaps)
    # taking both the batch answered 503 and its resend: the resend lands in the scrapes still open ...
    _, merged = replay(FIXTURES / "probe", skip=("007.bin",))
    assert [ordered(s) for s in merged] == [ordered(s) for s in snaps]
    # ... or, once they went out, is late: dropped, counted
    ingest, late = replay(FIXTURES / "probe", skip=("007.bin",), settle_s=0)
    assert sorted((s.source, s.ts) for s in late) == sorted((s.source, s.ts) for s in snaps)
    assert ingest.grouper.stats["late_samples"] == 31


# -- statuses -----------------------------------------------------------------------------------------------

REAL = (FIXTURES / "001.bin").read_bytes()


def test_a_good_request_is_204_without_a_body():
    result = RemoteWriteIngest().accept(REAL, HEADERS, now=0)
    assert (result.status, result.retry_after, result.headers, result.message) == (204, None, {}, "")


@pytest.mark.parametrize(
    "change, status",
    [
        ({"Content-Encoding": "gzip"}, 415),
        ({"Content-Encoding": None}, 415),
        ({"Content-Type": "application/json"}, 415),
        ({"Content-Type": None}, 415),
        ({"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}, 415),
        ({"Content-Type": "application/x-protobuf; proto=prometheus.WriteRequest"}, 204),
        ({"X-Prometheus-Remote-Write-Version": "2.0.0"}, 415),
        ({"X-Prometheus-Remote-Write-Version": None}, 204),
        ({"content-encoding": "SNAPPY", "Content-Encoding": None}, 204),  # names and the encoding in any case
    ],
)
def test_media_type_checks(change, status):
    headers = {**HEADERS, **change}
    result = RemoteWriteIngest().accept(REAL, {k: v for k, v in headers.items() if v is not None}, now=0)
    assert result.status == status
    if status == 415:
        (reject,) = result.rejects
        assert (reject.kind, reject.stage, reject.payload) == ("unsupported_media", "headers", REAL)


def test_the_version_header_can_be_required():
    ingest = RemoteWriteIngest(IngestConfig(require_version=True))
    headers = {k: v for k, v in HEADERS.items() if k != "X-Prometheus-Remote-Write-Version"}
    assert ingest.accept(REAL, headers, now=0).status == 415
    assert ingest.accept(REAL, HEADERS, now=0).status == 204


@pytest.mark.parametrize(
    "data, status, kind",
    [
        (b"garbage that is not snappy", 400, "bad_snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\x0a\xff")), 400, "truncated"),  # a truncated protobuf
        (b"\xff\xff\xff\x7f\x00", 413, "too_large"),  # announces 256 MiB
    ],
)
def test_a_bad_payload_is_refused_for_good_and_dead_lettered(data, status, kind):
    result = RemoteWriteIngest().accept(data, HEADERS, now=0)
    assert result.status == status and result.retry_after is None
    (reject,) = result.rejects
    assert (reject.kind, reject.stage, reject.payload) == (kind, "decode", data)
    assert result.message.strip() == reject.reason
    letter = reject.dead_letter("t.deadletter", ts=1.0)
    assert (letter.kind, letter.stage, letter.topic) == (kind, "decode", "t.deadletter")
    assert letter.original_bytes() == data and letter.payload_size == len(data)
    assert DeadLetter.model_validate_json(letter.encoded()) == letter


def test_a_body_over_the_limit_is_413():
    ingest = RemoteWriteIngest(IngestConfig(limits={"max_body_bytes": 100}))
    assert ingest.max_body_bytes == 100
    result = ingest.accept(REAL, HEADERS, now=0)
    assert result.status == 413 and result.rejects[0].kind == "too_large"


def test_authentication():
    ingest = RemoteWriteIngest(IngestConfig(bearer_tokens=("s3cret", "other"), basic_auth={"prom": "pw"}))
    basic = base64.b64encode(b"prom:pw").decode()
    for auth, status in [
        (None, 401),
        ("Bearer wrong", 401),
        ("Bearer s3cret", 204),
        ("bearer  other ", 204),
        (f"Basic {basic}", 204),
        ("Basic " + base64.b64encode(b"prom:no").decode(), 401),
        ("Basic " + base64.b64encode(b"nobody:pw").decode(), 401),
        ("Basic !!!", 401),
        ("Basic " + base64.b64encode(b"prompw").decode(), 401),
        ("Digest x", 401),
    ]:
        headers = {**HEADERS, **({"Authorization": auth} if auth else {})}
        result = ingest.accept(REAL, headers, now=0)
        assert result.status == status, auth
        if status == 401:
            assert result.rejects == [] and result.headers["WWW-Authenticate"].startswith("Bearer")
    assert "s3cret" not in repr(ingest.config)
    only_basic = RemoteWriteIngest(IngestConfig(basic_auth={"prom": "pw"}))
    assert only_basic.accept(REAL, {**HEADERS, "Authorization": "Bearer pw"}, now=0).status == 401


def test_back_pressure_answers_503_with_retry_after_before_decoding(monkeypatch):
    backlog = [0]
    ingest = RemoteWriteIngest(IngestConfig(max_backlog=10, retry_after_s=7), backlog=lambda: backlog[0])
    assert ingest.accept(REAL, HEADERS, now=0).status == 204
    backlog[0] = 10
    monkeypatch.setattr(receiver_module, "decode_write_request", lambda *a: pytest.fail("decoded while busy"))
    result = ingest.accept(REAL, HEADERS, now=1)
    assert (result.status, result.retry_after, result.headers) == (503, 7, {"Retry-After": "7"})
    assert result.snapshots == [] and result.rejects == [] and "busy" in result.message
    ingest429 = RemoteWriteIngest(IngestConfig(max_backlog=1, busy_status=429), backlog=lambda: 5)
    assert ingest429.accept(REAL, HEADERS, now=0)[:2] == (429, 5)
    assert ingest.stats["status_503"] == 1


def test_bad_series_are_left_out_and_the_rest_accepted():
    good = series_from_exposition("g 1\n", {"job": "vllm", "instance": "h:1"}, T0)
    bad = [
        Series((("__name__", "x"), ("job", "vllm")), ((T0, 1.0),)),  # no node label
        Series((("__name__", "y"), ("instance", "h:1"), ("job", "Not A Source")), ((T0, 1.0),)),
    ]
    ingest = RemoteWriteIngest(IngestConfig(grouping={"settle_s": 0}))
    result = ingest.accept(encode_write_request(good.series + bad + bad[:1]), HEADERS, now=0)
    assert result.status == 204 and [s.node for s in result.snapshots] == ["h"]
    assert sorted((r.kind, r.count, r.stage) for r in result.rejects) == [
        ("bad_source", 1, "series"),
        ("no_node", 2, "series"),
    ]
    no_node = next(r for r in result.rejects if r.kind == "no_node")
    assert no_node.payload == b'{__name__="x",job="vllm"}'
    letter = no_node.dead_letter("dl", ts=1.0)
    assert letter.reason.endswith("(2 series)") and letter.payload == '{__name__="x",job="vllm"}'


def test_poll_hands_out_settled_scrapes_and_close_the_rest():
    clock = [100.0]
    ingest = RemoteWriteIngest(IngestConfig(grouping={"settle_s": 5}), clock=lambda: clock[0])
    assert ingest.accept(REAL, HEADERS).snapshots == []
    assert ingest.poll().snapshots == []
    clock[0] = 105.0
    assert sorted(s.source for s in ingest.poll().snapshots) == ["dcgm", "vllm"]
    ingest.accept((FIXTURES / "002.bin").read_bytes(), HEADERS)
    assert len(ingest.close().snapshots) == 2 and ingest.poll(now=1e9).snapshots == []


def test_a_gone_target_drops_the_builders_state():
    ingest = RemoteWriteIngest(IngestConfig(grouping={"settle_s": 0}))
    target = {"job": "vllm", "instance": "h:1"}
    first = series_from_exposition("c_total 5\n", target, T0)
    ingest.accept(encode_write_request(first.series), HEADERS, now=0)
    assert len(ingest.builder._sources) == 1
    gone = [Series(s.labels, (), (T0 + 1000,)) for s in first.series]  # the target left the config
    result = ingest.accept(encode_write_request(gone), HEADERS, now=1)
    assert result.snapshots == [] and ingest.builder._sources == {} and ingest.grouper.stats["sources_gone"] == 1
    again = series_from_exposition("c_total 7\n", target, T0 + 2000)
    (snap,) = ingest.accept(encode_write_request(again.series), HEADERS, now=2).snapshots
    assert snap.prev_ts is None and snap.samples[0].delta is None  # started over


def test_an_oversized_snapshot_is_rejected_not_published(monkeypatch):
    monkeypatch.setattr(receiver_module, "LIMITS", SnapshotLimits(max_samples=3))
    text = "".join(f'g{{i="{i}"}} {i}\n' for i in range(4))
    stored = series_from_exposition(text, {"job": "vllm", "instance": "h:1"}, T0)
    result = RemoteWriteIngest(IngestConfig(grouping={"settle_s": 0})).accept(
        encode_write_request(stored.series), HEADERS, now=0
    )
    assert result.status == 204 and result.snapshots == []
    (reject,) = result.rejects
    assert (reject.kind, reject.stage, reject.node) == ("too_many_samples", "limits", "h")
    assert json.loads(reject.payload)["job"] == "vllm"  # the record, as a recording line


def test_a_scrape_the_builder_fails_on_is_a_reject_not_an_error(monkeypatch):
    ingest = RemoteWriteIngest(IngestConfig(grouping={"settle_s": 0}))

    def boom(rec):
        raise RuntimeError("bug")

    monkeypatch.setattr(ingest.builder, "build", boom)
    result = ingest.accept(REAL, HEADERS, now=0)
    assert result.status == 204 and result.snapshots == []
    assert sorted(r.kind for r in result.rejects) == ["build_failed", "build_failed"]
    assert isinstance(result.rejects[0], Reject) and result.rejects[0].reason == "RuntimeError: bug"


# -- the handler the server will have ------------------------------------------------------------------------


async def test_an_aiohttp_handler_is_ten_lines():
    ingest = RemoteWriteIngest(IngestConfig(grouping={"settle_s": 0}))
    published: list[Snapshot] = []
    letters: list[DeadLetter] = []

    async def write(request: web.Request) -> web.Response:
        body = await request.content.read(ingest.max_body_bytes + 1)
        result = ingest.accept(body, request.headers)
        published.extend(result.snapshots)
        letters.extend(r.dead_letter("deadletter") for r in result.rejects)
        return web.Response(status=result.status, headers=result.headers, text=result.message or None)

    app = web.Application(client_max_size=ingest.max_body_bytes + 1)
    app.router.add_post("/api/v1/write", write)
    async with TestServer(app, host="127.0.0.1", port=0) as server, ClientSession() as client:
        url = server.make_url("/api/v1/write")
        async with client.post(url, data=REAL, headers=HEADERS) as resp:
            assert resp.status == 204
        async with client.post(url, data=b"junk", headers=HEADERS) as resp:
            assert resp.status == 400 and "snappy" in await resp.text()
    assert sorted(s.source for s in published) == ["dcgm", "vllm"]
    assert [d.kind for d in letters] == ["bad_snappy"]
