"""Federation pull: selectors derived from the catalog, the /federate body parsed within bounds, snapshots equal
to the agent's, no duplicates across pulls, failures as rejects; and against Debian's real Prometheus (slow).

A /federate body is built here as Prometheus 2.x serves it (web/federate.go): the series the selectors pick, one
``# TYPE name untyped`` per name, the target labels sorted, the external labels appended, Go's float format and
each series' scrape timestamp in ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import socket
import time
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path

import pytest
from aiohttp import web

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.ingest.federation import (
    FederationConfig,
    FederationPuller,
    match_selectors,
    name_regex,
    source_metrics,
)
from tailhound.ingest.federation_text import FederateParser, FederateTextError, TextLimits, parse_federate
from tailhound.ingest.grouping import TARGET_DOWN
from tailhound.ingest.remote_write import Series, series_from_exposition
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import Snapshot
from tests.http_helpers import serve_app
from tests.ingest.prometheus_proc import Prometheus

from .capture_fixture import grow

AGENT_FIXTURES = Path(__file__).parents[1] / "agents" / "fixtures"
PAGES = {
    "dcgm": (AGENT_FIXTURES / "dcgm_exporter.prom").read_text(),
    "vllm": (AGENT_FIXTURES / "vllm_v1.prom").read_text(),
}
NODE = "gpu-node-2"
T0 = 1_767_225_600_000
TARGETS = {
    "dcgm": {"job": "dcgm", "instance": "10.0.0.7:9400", "node": NODE},
    "vllm": {"job": "vllm", "instance": "10.0.0.7:8000", "node": NODE},
}
EXTERNAL = {"cluster": "lab"}
GROUPING = {"close_on_newer": True, "common_labels": ("instance", "node", "cluster")}
CATALOG = default_catalog()
SELECTORS = match_selectors(CATALOG, jobs={})


# -- a /federate body as Prometheus serves it ----------------------------------------------------------------


def go_float(v: float) -> str:
    """strconv.FormatFloat(v, 'g', -1, 64) as expfmt writes it: 1.234567e+06, 0.4183, 950, NaN, +Inf."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    d = Decimal(repr(v)).normalize()
    sign, digits, exp = d.as_tuple()
    exp10 = len(digits) - 1 + exp
    if exp10 < -4 or exp10 >= 6:  # the shortest form decides with precision 6
        mant = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
        return f"{'-' if sign else ''}{mant}e{'+' if exp10 >= 0 else '-'}{abs(exp10):02d}"
    return format(d, "f")


def _promql_unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def selected(labels: dict[str, str], selectors: Iterable[str]) -> bool:
    """Whether a series matches one of `selectors` (the forms match_selectors writes)."""
    for sel in selectors:
        head, _, rest = sel.partition("{")
        if head and labels.get("__name__") != head:
            continue
        matchers = re.findall(r'(\w+)(=~|=)"((?:[^"\\]|\\.)*)"', rest)
        if all(
            re.fullmatch(_promql_unquote(v), labels.get(k, ""))
            if op == "=~"
            else labels.get(k, "") == _promql_unquote(v)
            for k, op, v in matchers
        ):
            return True
    return False


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def federate_body(
    scrapes: Iterable[tuple[str | None, dict[str, str], int]],
    selectors: Iterable[str] = SELECTORS,
    external: dict[str, str] | None = None,
) -> str:
    """What /federate serves when the latest scrapes are `scrapes`: (page text, None for a failed scrape: `up 0`
    alone; target labels; timestamp ms)."""
    external = EXTERNAL if external is None else external
    selectors = list(selectors)
    series: list[Series] = []
    picked: dict[tuple[str | None, str | None], bool] = {}  # (name, job) -> selected: the selectors use no other
    for text, target, ts in scrapes:
        for s in series_from_exposition(text or "", target, ts, up=text is not None).series:
            key = (s.name, dict(s.labels).get("job"))
            if key not in picked:
                picked[key] = selected(dict(s.labels), selectors)
            if picked[key]:
                series.append(s)
    series.sort(key=lambda s: (s.name, s.labels))
    lines, last = [], None
    for s in series:
        if s.name != last:
            lines.append(f"# TYPE {s.name} untyped")
            last = s.name
        own = [(k, v) for k, v in s.labels if k != "__name__"]
        have = {k for k, _ in own}
        own += [(k, v) for k, v in sorted({**external, "instance": ""}.items()) if k not in have]
        ((ts, value),) = s.samples
        labels = ",".join(f'{k}="{_esc(v)}"' for k, v in own)
        lines.append(f"{s.name}{{{labels}}} {go_float(value)} {ts}")
    return "\n".join(lines) + "\n"


def agent_snapshot(builder: SnapshotBuilder, text: str | None, job: str, snap: Snapshot) -> Snapshot:
    """What the agent makes of the page `text` scraped at the time of `snap`, its samples cut to the catalog's."""
    rec = ScrapeRecord(
        ts=snap.ts,
        node=snap.node,
        job=job,
        labels=snap.labels,
        interval_s=snap.interval_s,
        **({"body": text} if text is not None else {"error": "HTTP 503"}),
    )
    a = builder.build(rec)
    return a.model_copy(update={"samples": [s for s in a.samples if (job, s.name) in CATALOG.by_metric]})


def ordered(snap: Snapshot) -> list:
    return sorted(snap.samples, key=lambda s: (s.name, sorted(s.labels.items())))


def puller(**config) -> FederationPuller:
    return FederationPuller(FederationConfig(**{"url": "http://127.0.0.1:9/", "grouping": GROUPING, **config}))


# -- selectors ----------------------------------------------------------------------------------------------


def test_every_catalog_metric_is_selected_histogram_parts_included_and_nothing_else():
    wanted = set()
    for source, metric in CATALOG.by_metric:
        wanted.add((source, metric))
        if CATALOG.kind_of(source, metric) == "histogram":
            wanted.update((source, metric + part) for part in ("_bucket", "_sum", "_count"))
    assert ("vllm", "vllm:time_to_first_token_seconds_bucket") in wanted
    for source, name in wanted:
        assert selected({"__name__": name, "job": source}, SELECTORS), name
    for name in (
        "vllm:prompt_tokens_created",
        "go_goroutines",
        "DCGM_FI_DEV_GPU_TEMPX",
        "xDCGM_FI_DEV_GPU_TEMP",
        "vllm:time_to_first_token_seconds_created",
        "scrape_duration_seconds",
    ):
        assert not selected({"__name__": name, "job": "vllm"}, SELECTORS), name
    assert selected({"__name__": "up", "job": "vllm"}, SELECTORS)
    assert not selected({"__name__": "up", "job": "kubernetes-pods"}, SELECTORS)  # no source: no empty snapshots
    assert match_selectors(CATALOG) == SELECTORS[:-1] + ["up"]
    assert match_selectors(default_catalog(), jobs={}) == SELECTORS  # deterministic
    assert len(SELECTORS) == len(CATALOG.sources()) + 1 and all(len(s) <= 4000 for s in SELECTORS)
    assert sum(len(s) for s in SELECTORS) < 6000  # names with a common prefix folded: a URL of a few KB


def test_long_selectors_are_split_and_still_select_everything():
    small = match_selectors(CATALOG, jobs={}, max_length=200)
    assert len(small) > len(SELECTORS) and all(len(s) <= 200 for s in small)
    for source in CATALOG.sources():
        for name in source_metrics(CATALOG, source):
            assert selected({"__name__": name, "job": source}, small)


def test_by_job_selects_each_sources_names_from_its_jobs_and_up_of_those_jobs():
    cfg = FederationConfig(url="http://prom:9090/prometheus/", grouping={"sources": {"dcgm-exporter": "dcgm"}})
    sel = cfg.selectors(CATALOG)
    assert cfg.federate_url == "http://prom:9090/prometheus/federate"
    assert selected({"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "dcgm-exporter"}, sel)
    assert selected({"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "dcgm"}, sel)
    assert not selected({"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "kube-state"}, sel)
    assert not selected({"__name__": "http_requests_total", "job": "api"}, sel)  # a generic name, another job
    assert selected({"__name__": "up", "job": "dcgm-exporter"}, sel)
    assert not selected({"__name__": "up", "job": "kubernetes-pods"}, sel)
    only = FederationConfig(url="http://p:9090", sources=("vllm",), match=('{__name__="extra"}',)).selectors(CATALOG)
    assert only[-1] == '{__name__="extra"}' and not selected({"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "dcgm"}, only)
    with pytest.raises(ValueError, match="not in the catalog"):
        match_selectors(CATALOG, ["nope"])


def test_matchers_narrow_every_selector_to_a_shard():
    sel = FederationConfig(url="http://p:9090", matchers={"node": 'gpu "7"'}).selectors(CATALOG)
    assert all(',node="gpu \\"7\\""' in s for s in sel)
    assert selected({"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "dcgm", "node": 'gpu "7"'}, sel)
    assert not selected({"__name__": "DCGM_FI_DEV_GPU_TEMP", "job": "dcgm", "node": "gpu-8"}, sel)
    assert not selected({"__name__": "up", "job": "dcgm", "node": "gpu-8"}, sel)
    assert match_selectors(CATALOG, ["vllm"], matchers={"cluster": "a"})[-1] == 'up{cluster="a"}'
    with pytest.raises(ValueError):
        FederationConfig(url="http://p:9090", matchers={"not-a-label": "x"})


def test_name_regex_folds_prefixes_and_escapes():
    assert name_regex(["a_b", "a_c", "a"]) == "a(?:_b|_c)?"
    assert name_regex(["x:y_total"]) == "x:y_total"
    assert name_regex(["my.metric", "my.metric_total"]) == r"my\.metric(?:_total)?"
    sel = match_selectors(CATALOG, ["vllm"], jobs={"gpu.pool": "vllm"}, by_job=True)
    assert sel[0].endswith(r',job=~"gpu\\.pool|vllm"}') and selected({"__name__": "up", "job": "gpu.pool"}, sel)
    assert not selected({"__name__": "up", "job": "gpuxpool"}, sel)


def test_config_refuses_secrets_in_yaml_and_empty_selectors():
    with pytest.raises(ValueError, match="extra"):
        FederationConfig(url="http://p:9090", bearer_token="x")
    with pytest.raises(ValueError, match="not both"):
        FederationConfig(url="http://p:9090", bearer_token_file="/t", bearer_token_env="T")
    with pytest.raises(ValueError, match="no match"):
        FederationConfig(url="http://p:9090", derive_match=False)
    with pytest.raises(ValueError):
        FederationConfig(url="prom:9090")
    assert FederationConfig(url="http://p:9090").grouping.close_on_newer


# -- the body -----------------------------------------------------------------------------------------------


def test_a_real_format_body_parses_to_the_series_prometheus_stores():
    body = federate_body([(PAGES["dcgm"], TARGETS["dcgm"], T0 + 851), (PAGES["vllm"], TARGETS["vllm"], T0 + 260)])
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP untyped\n" in body and "} 1.234567e+06 1767225600260\n" in body
    assert 'vllm:prompt_tokens_total{engine="0",instance="10.0.0.7:8000",job="vllm",model_name=' in body
    parsed = parse_federate(body.encode(), fetch_ms=1)
    assert parsed.problems == [] and parsed.metadata == []
    expected = []
    for job, ts in (("dcgm", T0 + 851), ("vllm", T0 + 260)):
        stored = series_from_exposition(PAGES[job], {**TARGETS[job], **EXTERNAL}, ts).series
        expected += [s for s in stored if selected(dict(s.labels), SELECTORS)]
    assert sorted(parsed.series) == sorted(expected)
    assert parsed.lines == len(expected) and all(list(s.labels) == sorted(s.labels) for s in parsed.series)


def test_values_escapes_empty_labels_and_a_missing_timestamp():
    body = (
        "# HELP x whatever\n# TYPE x untyped\n"
        'x{a="back\\\\slash \\"q\\" new\\nline",b="}{,=",instance=""} NaN 1000\n'
        'x{a="2"} +Inf 1000\r\n'
        'x{a="3",} -Inf\n'
        "\n"
        "y 1.5e+06 7\n"
        '{"my.metric","odd label"="v"} -0.25 8\n'
        "# TYPE z counter\n"
    )
    parsed = parse_federate(body, fetch_ms=5000)
    got = {s.labels: s.samples[0] for s in parsed.series}
    assert len(got) == 5 and parsed.problems == []
    assert math.isnan(got[(("__name__", "x"), ("a", 'back\\slash "q" new\nline'), ("b", "}{,="))][1])
    assert got[(("__name__", "x"), ("a", "2"))] == (1000, math.inf)
    assert got[(("__name__", "x"), ("a", "3"))] == (5000, -math.inf)  # no timestamp: the fetch time
    assert got[(("__name__", "y"),)] == (7, 1_500_000.0)
    assert got[(("__name__", "my.metric"), ("odd label", "v"))] == (8, -0.25)
    assert [(m.family, m.type) for m in parsed.metadata] == [("z", "counter")]


def test_malformed_lines_are_counted_with_an_example_and_the_rest_kept():
    good = federate_body([(PAGES["vllm"], TARGETS["vllm"], T0)])
    bad = [
        "vllm:x{a=unquoted} 1 2",
        'vllm:x{a="1"} one 2',
        'vllm:x{a="1"} 1 2.5',
        'vllm:x{a="1"} 1 2 3',
        'vllm:x{a="1" 1 2',
        "9bad 1 2",
        'vllm:x{a="1",a="2"} 1 2',
        'vllm:x{a="1"}1 2',
        "vllm:x{" + ",".join(f'l{i}="v"' for i in range(70)) + "} 1 2",
        'vllm:x{a="' + "v" * 5000 + '"} 1 2',
    ]
    lines = good.splitlines()
    body = "\n".join(lines[:5] + bad + lines[5:]) + "\n"
    parsed = parse_federate(body, fetch_ms=1)
    assert len(parsed.series) == len(parse_federate(good, 1).series)
    problems = {p.reason: (p.count, p.example) for p in parsed.problems}
    assert problems == {
        "bad_labels": (4, bad[0]),
        "bad_value": (3, bad[1]),
        "bad_timestamp": (1, bad[2]),
        "label_limits": (2, bad[8][:300]),
    }
    assert parsed.lines == len(parsed.series) + 10
    assert parse_federate(b"x 1 2\n\xff\xfe 1 2\n", 1).problems[0].reason == "bad_utf8"


def test_body_and_series_limits_refuse_the_whole_body():
    body = federate_body([(PAGES["vllm"], TARGETS["vllm"], T0)]).encode()
    with pytest.raises(FederateTextError, match="at most 1000") as exc:
        parse_federate(body, 1, TextLimits(max_body_bytes=1000))
    assert exc.value.reason == "too_large"
    with pytest.raises(FederateTextError, match="more than 3 series") as exc:
        parse_federate(body, 1, TextLimits(max_series=3))
    assert exc.value.reason == "too_many_series"
    long_line = "x " + "1" * 70_000 + " 2\n"
    assert parse_federate(long_line, 1).problems[0].reason == "line_too_long"


def test_the_parser_remembers_label_sets_and_hands_out_the_same_objects():
    body = federate_body([(PAGES["dcgm"], TARGETS["dcgm"], T0)])
    p = FederateParser()
    first, second = p.parse(body, 1), p.parse(body, 1)
    assert all(a.labels is b.labels for a, b in zip(first.series, second.series, strict=True))


# -- snapshots ----------------------------------------------------------------------------------------------


def test_pulls_give_the_agents_snapshots_with_deltas_and_repeats_are_unchanged_not_late():
    p = puller(interval_s=5)
    agents = {job: SnapshotBuilder() for job in PAGES}
    got: list[Snapshot] = []
    for k in range(3):
        body = federate_body(
            [(grow(PAGES[job], k), TARGETS[job], T0 + k * 5000 + off) for job, off in (("dcgm", 851), ("vllm", 260))]
        )
        emitted = p.ingest(body, now=(T0 + k * 5000) / 1000 + 2)
        assert emitted.rejects == [] and len(emitted.snapshots) == 2
        for snap in emitted.snapshots:
            a = agent_snapshot(agents[snap.source], grow(PAGES[snap.source], k), snap.source, snap)
            assert ordered(snap) == ordered(a), (k, snap.source)
            assert snap.labels == {"instance": TARGETS[snap.source]["instance"], "node": NODE, "cluster": "lab"}
        got += emitted.snapshots
        again = p.ingest(body, now=(T0 + k * 5000) / 1000 + 3)  # Prometheus has not scraped since
        assert again == ([], [])
    assert p.stats["unchanged"] == 3 * p.stats["series"] // 6 and p.grouper.stats.get("late_samples", 0) == 0
    vllm = [s for s in got if s.source == "vllm"]
    assert [s.prev_ts for s in vllm] == [None, vllm[0].ts, vllm[1].ts] and not any(s.gap for s in vllm)
    assert next(vllm[1].find("vllm:prompt_tokens_total")).delta == 100.0
    ttft = next(vllm[2].find("vllm:time_to_first_token_seconds"))
    assert ttft.delta is not None and ttft.delta.count == 2
    dcgm = [s for s in got if s.source == "dcgm"]
    assert not any(s.name == "DCGM_FI_DEV_MEMORY_TEMP" for s in dcgm[0].samples)  # the NOT_SUPPORTED sentinel
    assert {s.interval_s for s in vllm[1:]} == {5.0}


def test_a_target_down_is_a_gap_snapshot_and_its_return_a_gap():
    p = puller(interval_s=5)
    job = "vllm"
    scrapes = [grow(PAGES[job], 0), None, grow(PAGES[job], 1)]
    snaps = []
    for k, text in enumerate(scrapes):
        body = federate_body([(text, TARGETS[job], T0 + k * 5000)])
        if text is None:
            assert body.count("\n") == 2 and 'up{cluster="lab",instance="10.0.0.7:8000"' not in body
        snaps += p.ingest(body, now=(T0 + k * 5000) / 1000 + 1).snapshots
    first, down, back = snaps
    assert (down.error, down.gap, down.samples, down.prev_ts) == (TARGET_DOWN, True, [], first.ts)
    assert back.gap and back.prev_ts == first.ts and back.samples  # deltas over the failure, as the agent's


def test_pulling_slower_than_prometheus_scrapes_spans_the_pulls_without_a_gap():
    p = puller(interval_s=15)
    got = []
    for ts in (T0, T0 + 10_000, T0 + 30_000, T0 + 40_000, T0 + 60_000):  # 10 s scrapes pulled every 15 s
        got += p.ingest(federate_body([(PAGES["vllm"], TARGETS["vllm"], ts)]), now=ts / 1000 + 1).snapshots
    assert [s.interval_s for s in got] == [None, 15.0, 15.0, 15.0, 15.0] and not any(s.gap for s in got)


def test_series_left_out_by_the_grouping_are_rejects():
    body = federate_body([(PAGES["vllm"], {"job": "vllm"}, T0)], external={})
    lines = sum(1 for line in body.splitlines() if not line.startswith("#"))
    emitted = puller(grouping={"close_on_newer": True, "node_labels": ("node",)}).ingest(body, now=T0 / 1000)
    assert emitted.snapshots == []
    (r,) = emitted.rejects
    assert (r.kind, r.stage, r.count) == ("no_node", "series", lines) and r.payload.startswith(b'{__name__="')
    bad = puller().ingest("x{a=b} 1 2\n", now=1)
    assert [(r.kind, r.stage, r.payload) for r in bad.rejects] == [("bad_labels", "parse", b"x{a=b} 1 2")]


# -- over HTTP ----------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fake_prometheus(handler):
    app = web.Application()
    app.router.add_get("/{prefix:.*}federate", handler)
    async with serve_app(app) as base:
        yield base


async def test_pull_once_sends_the_selectors_and_the_token_and_reads_the_body(tmp_path, monkeypatch):
    seen = []
    body = federate_body([(PAGES["vllm"], TARGETS["vllm"], T0)])

    async def handler(request: web.Request) -> web.Response:
        seen.append(request)
        return web.Response(text=body, content_type="text/plain", headers={"X-Prom": "1"})

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    async with fake_prometheus(handler) as url:
        p = FederationPuller(FederationConfig(url=url + "/prom", bearer_token_file=token, grouping=GROUPING))
        emitted = await asyncio.wait_for(p.pull_once(), 10)
        assert [s.source for s in emitted.snapshots] == ["vllm"] and emitted.rejects == []
        assert (await asyncio.wait_for(p.pull_once(), 10)) == ([], [])
        await p.close()
        monkeypatch.setenv("PROM_TOKEN", "from-env")
        p2 = FederationPuller(FederationConfig(url=url, bearer_token_env="PROM_TOKEN"))
        await asyncio.wait_for(p2.pull_once(), 10)
        await p2.close()
    first = seen[0]
    assert first.path == "/prom/federate" and first.query.getall("match[]") == p.selectors
    assert first.headers["Accept"] == "text/plain;version=0.0.4"
    assert first.headers["Authorization"] == "Bearer s3cret" and seen[2].headers["Authorization"] == "Bearer from-env"
    assert p.stats["pulls"] == 2 and p.stats["unchanged"] == p.stats["series"] // 2 and p.stats["bytes"] > 0


async def test_failures_are_rejects_never_exceptions(tmp_path):
    mode = {"now": "500"}

    async def handler(request: web.Request) -> web.StreamResponse:
        if mode["now"] == "500":
            return web.Response(status=500, text="query timed out in expression evaluation")
        if mode["now"] == "slow":
            await asyncio.sleep(5)
            return web.Response(text="up 1 1\n", content_type="text/plain")
        if mode["now"] == "html":
            return web.Response(text="<html>login</html>", content_type="text/html")
        if mode["now"] == "big":
            resp = web.StreamResponse()
            resp.content_type = "text/plain"
            await resp.prepare(request)
            for _ in range(64):  # 64 x 8 KiB, no Content-Length: the limit is checked while reading
                await resp.write(b"# " + b"x" * 8190 + b"\n")
            await resp.write_eof()
            return resp
        return web.Response(text='x{a=b} 1 2\nup{job="vllm",instance="h:1"} 1 5\n', content_type="text/plain")

    async with fake_prometheus(handler) as url:
        p = FederationPuller(FederationConfig(url=url, timeout_s=0.5, max_body_bytes=100_000))
        reasons = {}
        for m in ("500", "slow", "html", "big"):
            mode["now"] = m
            t = time.monotonic()
            emitted = await asyncio.wait_for(p.pull_once(), 10)
            assert time.monotonic() - t < 3
            (r,) = emitted.rejects
            assert (r.kind, r.stage, emitted.snapshots) == ("federate_failed", "fetch", [])
            reasons[m] = r.reason
        mode["now"] = "ok"
        ok = await asyncio.wait_for(p.pull_once(), 10)
        await p.close()
    assert reasons["500"] == f"HTTP 500 from {url}/federate: query timed out in expression evaluation"
    assert "no complete answer within 0.5 s" in reasons["slow"]
    assert "'text/html', not the text exposition format" in reasons["html"]
    assert "over 100000 bytes" in reasons["big"]
    assert p.stats["pulls_failed"] == 4 and p.last_error is None
    assert [r.kind for r in ok.rejects] == ["bad_labels"] and len(ok.snapshots) == 1
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = FederationPuller(
        FederationConfig(url=f"http://user:pw@127.0.0.1:{port}", timeout_s=2, bearer_token_file=tmp_path / "missing")
    )
    (r,) = (await asyncio.wait_for(p.pull_once(), 10)).rejects
    assert "bearer_token_file" in r.reason and "No such file" in r.reason
    p = FederationPuller(FederationConfig(url=f"http://user:pw@127.0.0.1:{port}", timeout_s=2))
    (r,) = (await asyncio.wait_for(p.pull_once(), 10)).rejects
    assert r.reason.startswith(f"http://127.0.0.1:{port}/federate: ConnectError") and "pw" not in r.reason
    await p.close()


def test_parse_time_of_a_10k_series_body():
    """~10k series: 700 vLLM targets of 15 catalog series each."""
    scrapes = [
        (PAGES["vllm"], {"job": "vllm", "instance": f"10.0.{i // 250}.{i % 250}:8000", "node": f"gpu-{i}"}, T0 + i)
        for i in range(700)
    ]
    body = federate_body(scrapes).encode()
    lines = body.count(b"\n")
    t = time.perf_counter()
    parsed = parse_federate(body, 1)
    cold = time.perf_counter() - t
    p = puller()
    t = time.perf_counter()
    emitted = p.ingest(body, now=T0 / 1000)
    pull = time.perf_counter() - t
    print(
        f"\n{lines} lines, {len(body)} bytes: parse {cold * 1000:.1f} ms, parse+group+build {pull * 1000:.1f} ms, "
        f"{len(emitted.snapshots)} snapshots"
    )
    assert len(parsed.series) == 10_500 and len(emitted.snapshots) == 700 and cold < 5
    t = time.perf_counter()
    assert p.ingest(body, now=T0 / 1000 + 1) == ([], [])
    print(f"the same body again (unchanged): {(time.perf_counter() - t) * 1000:.1f} ms")


# -- Debian's real Prometheus -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_real_prometheus_federate_gives_the_agents_snapshots(tmp_path):
    served: dict[str, list[tuple[float, str]]] = {job: [] for job in PAGES}

    async def page(request: web.Request) -> web.Response:
        job = request.match_info["job"]
        text = grow(PAGES[job], len(served[job]))
        served[job].append((time.time(), text))
        return web.Response(text=text, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{job}", page)
    async with serve_app(app) as pages:
        jobs = "".join(
            f"""
  - job_name: {job}
    metrics_path: /{job}
    static_configs:
      - targets: ["{pages.removeprefix("http://")}"]
        labels:
          node: {NODE}
"""
            for job in PAGES
        )
        config = (
            f"global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  external_labels:\n    cluster: lab\n"
            f"scrape_configs:{jobs}"
        )
        prometheus = Prometheus(tmp_path / "prometheus", config)
        await prometheus.start()
        p = FederationPuller(FederationConfig(url=prometheus.url, timeout_s=5, interval_s=2, grouping=GROUPING))
        try:
            got: list[Snapshot] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                len({s.ts for s in got if s.source == "vllm"}) < 3 or len({s.ts for s in got if s.source == "dcgm"}) < 3
            ):
                emitted = await asyncio.wait_for(p.pull_once(), 10)
                assert all(r.kind == "federate_failed" for r in emitted.rejects), emitted.rejects
                got += emitted.snapshots
                got += (await asyncio.wait_for(p.pull_once(), 10)).snapshots  # at once: mostly unchanged
                await asyncio.sleep(1.3)
            body = await p.fetch()  # what a real /federate looks like, for the parser's sake
            (tmp_path / "federate.txt").write_bytes(body)
        finally:
            await p.close()
            await prometheus.stop()
    assert parse_federate(body, 1).problems == [] and b"# TYPE up untyped\n" in body
    for job in PAGES:
        snaps = [s for s in got if s.source == job]
        assert len(snaps) >= 3, (job, p.stats, prometheus.log_tail())
        assert len({s.ts for s in snaps}) == len(snaps)  # no duplicates
        builder = SnapshotBuilder()
        for k, snap in enumerate(snaps):
            # the page served when Prometheus scraped (its timestamp: the scrape's start)
            _, text = min(served[job], key=lambda e: abs(e[0] - snap.ts))
            assert snap.node == NODE and snap.labels["cluster"] == "lab"
            assert ordered(snap) == ordered(agent_snapshot(builder, text, job, snap)), (job, k)
        assert snaps[1].prev_ts == snaps[0].ts and not any(s.gap for s in snaps[1:])
    vllm = [s for s in got if s.source == "vllm"]
    assert next(vllm[1].find("vllm:prompt_tokens_total")).delta == 100.0 * round(vllm[1].ts - vllm[0].ts)
    assert p.stats["unchanged"] > 0 and p.grouper.stats.get("late_samples", 0) == 0
    # Prometheus' own format: the target labels sorted, then the external labels; Go's floats
    assert re.search(rb'\nup\{instance="127.0.0.1:\d+",job="vllm",node="gpu-node-2",cluster="lab"\} 1 \d{13}\n', body)
    assert re.search(rb"\nvllm:prompt_tokens_total\{[^}]+\} \d\.\d+e\+06 \d{13}\n", body)


def test_a_grouping_given_in_the_file_keeps_whole_scrapes_on():
    # /federate answers whole scrapes in order: close_on_newer stays on unless the file turns it off
    assert FederationConfig(url="http://127.0.0.1:9090", grouping={"sources": {"gpu": "dcgm"}}).grouping.close_on_newer
    assert not FederationConfig(url="http://127.0.0.1:9090", grouping={"close_on_newer": False}).grouping.close_on_newer


async def test_a_body_sent_in_pieces_is_read_whole_and_a_cut_body_is_a_failed_pull():
    """The pull reads the whole body however it arrives (a single read returns only what has arrived), and a body
    shorter than its Content-Length (the server died mid-answer) fails the pull instead of making part scrapes."""
    lines = [f'up{{job="vllm",instance="h{i}:1"}} 1 5\n'.encode() for i in range(50)]
    body = b"".join(lines)
    mode = {"cut": False}

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        cut = mode["cut"]
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        for i in range(0, len(lines) // 2 if cut else len(lines), 10):  # in pieces, with pauses in between
            writer.write(b"".join(lines[i : i + 10]))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    puller = FederationPuller(FederationConfig(url=f"http://127.0.0.1:{port}", timeout_s=5))
    try:
        whole = await asyncio.wait_for(puller.pull_once(), 10)
        mode["cut"] = True
        cut = await asyncio.wait_for(puller.pull_once(), 10)
    finally:
        await puller.close()
        server.close()
        await server.wait_closed()
    assert whole.rejects == [] and len(whole.snapshots) == 50  # every target's `up`: the body read whole
    assert puller.stats["bytes"] == len(body)
    (r,) = cut.rejects
    assert (r.kind, r.stage, cut.snapshots) == ("federate_failed", "fetch", [])
    assert "RemoteProtocolError" in r.reason or "incomplete" in r.reason.lower(), r.reason
