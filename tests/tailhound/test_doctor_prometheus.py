"""``tailhound doctor --prometheus URL``: the rules' coverage from what a Prometheus has, read through /federate
as the federation ingest reads it; a job carrying a catalog source's metrics under another name gets its fix.

The fake Prometheus (aiohttp, 127.0.0.1) answers /federate as Prometheus 2.x does, with the series the request's
``match[]`` selectors pick (tests/ingest/test_federation.py builds the body).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re

import pytest
from aiohttp import web
from typer.testing import CliRunner

from tailhound.catalog import default_catalog
from tailhound.cli import app
from tailhound.doctor.observed import Observed
from tailhound.doctor.prometheus import job_hints, observe_prometheus, parse_job_sources
from tailhound.doctor.report import diagnose, render_table
from tailhound.errors import TailhoundError
from tailhound.resources import default_rules_dir
from tailhound.streams.ruleset.rulefile import load_rules
from tests.http_helpers import serve_app
from tests.ingest.test_federation import PAGES, T0, federate_body
from tests.tailhound.test_doctor import THERMAL_RULE

NODE = "gpu-node-2"
SCRAPES = [
    (PAGES["dcgm"], {"job": "dcgm-exporter", "instance": "10.0.0.7:9400", "node": NODE}, T0 + 851),
    (PAGES["vllm"], {"job": "vllm", "instance": "10.0.0.7:8000", "node": NODE}, T0 + 260),
    (None, {"job": "vllm", "instance": "10.0.0.8:8000", "node": "gpu-node-3"}, T0 + 300),  # down: `up 0`
    ("# TYPE foo gauge\nfoo 1\n", {"job": "kubernetes-pods", "instance": "10.0.9.9:80"}, T0),  # no source
]
HINT = (
    "hint: job 'dcgm-exporter' carries dcgm metrics: map it: sources: {dcgm-exporter: dcgm} "
    "(doctor: --job-source dcgm-exporter=dcgm)"
)


@pytest.fixture
def thermal_rules(tmp_path):
    d = tmp_path / "rules"
    d.mkdir()
    (d / "gpu.yaml").write_text(THERMAL_RULE, encoding="utf-8")
    return d


@contextlib.asynccontextmanager
async def fake_prometheus(status: int = 200):
    requests: list[list[str]] = []

    async def federate(request: web.Request) -> web.Response:
        selectors = request.query.getall("match[]", [])
        requests.append(selectors)
        if status != 200:
            return web.Response(status=status, text="unavailable")
        return web.Response(text=federate_body(SCRAPES, selectors), content_type="text/plain")

    server = web.Application()
    server.router.add_get("/federate", federate)
    async with serve_app(server) as base:
        yield base, requests


async def doctor(*args: str):
    """The CLI in a thread (it runs its own event loop) while the fake Prometheus serves on this one."""
    return await asyncio.wait_for(asyncio.to_thread(CliRunner().invoke, app, ["doctor", *args]), 60)


async def test_the_doctor_reads_a_prometheus_and_says_how_to_map_a_misnamed_job(thermal_rules):
    async with fake_prometheus() as (url, requests):
        result = await doctor("--prometheus", url, "--rules", str(thermal_rules))
        assert result.exit_code == 1, result.output  # the critical rule is blind: dcgm's metrics are unmapped
        out = result.output
        assert out.startswith(
            "sources: dcgm-exporter (1 node(s), 0 mapped metrics), "
            "vllm (2 node(s), 6 mapped metrics, 1 failed collections)\n" + HINT + "\n"
        )
        assert re.search(
            r"^hot-and-slow\s+critical\s+blind\s+gpu-thermal-throttle\s+gpu.sm_clock, "
            r"gpu.sm_clock_max, gpu.temperature$",
            out,
            re.M,
        )
        assert re.search(r"^queue\s+warning\s+ok\s+symptom\s+-$", out, re.M)
        assert "kubernetes-pods" not in out  # `up` only of the jobs that are sources

        mapped = await doctor(
            "--prometheus", url, "--rules", str(thermal_rules), "--job-source", "dcgm-exporter=dcgm", "--format", "json"
        )
        data = json.loads(mapped.output)
        assert data["job_hints"] == [] and data["notes"] == []
        assert data["sources"]["dcgm"] == {"nodes": [NODE], "mapped_metrics": 2, "failed_collections": 0}
        assert {"gpu.temperature", "gpu.sm_clock"} <= set(data["signals"])
        blind = next(r for r in data["rules"] if r["rule"] == "hot-and-slow")
        assert blind["missing"] == ["gpu.sm_clock_max"]  # the one the page really lacks

        unmapped = json.loads((await doctor("--prometheus", url, "--format", "json")).output)
        assert unmapped["job_hints"] == [{"job": "dcgm-exporter", "source": "dcgm", "fix": HINT[len("hint: ") :]}]
    # every selector the ingest derives, names from every job (the doctor looks for misnamed jobs)
    assert all('job=~"' not in s for s in requests[0][:-1]) and requests[0][-1].startswith("up{job=~")


async def test_node_labels_and_series_left_out_are_noted():
    async with fake_prometheus() as (url, _):
        seen = await observe_prometheus(
            url, job_sources={"dcgm-exporter": "dcgm"}, node_labels=["Hostname"], timeout_s=5
        )
    assert seen.nodes == {"dcgm": {NODE}}  # dcgm-exporter's pages carry Hostname; vLLM's do not
    assert seen.hints == {} and len(seen.notes) == 1
    assert re.fullmatch(
        r"\d+ series left out: a series without any of the node labels \('Hostname',\) "
        r'\(e\.g\. \{__name__="up",.*\}\)',
        seen.notes[0],
    )


async def test_a_failed_pull_is_an_error_naming_why():
    async with fake_prometheus(status=503) as (url, _):
        with pytest.raises(TailhoundError, match=rf"--prometheus: HTTP 503 from {url}/federate: unavailable"):
            await observe_prometheus(url, timeout_s=5)
        result = await doctor("--prometheus", url)
        assert result.exit_code != 0 and isinstance(result.exception, TailhoundError)
    with pytest.raises(TailhoundError, match="--prometheus 'prom:9090'"):
        await observe_prometheus("prom:9090")


def test_options_are_checked():
    with pytest.raises(TailhoundError, match="expected JOB=SOURCE"):
        parse_job_sources(["dcgm-exporter"])
    assert parse_job_sources(["a=dcgm", " b = vllm "]) == {"a": "dcgm", "b": "vllm"}
    with pytest.raises(TailhoundError, match="go with --prometheus"):
        CliRunner().invoke(app, ["doctor", "--job-source", "a=dcgm"], catch_exceptions=False)
    with pytest.raises(TailhoundError, match="or a Prometheus"):
        CliRunner().invoke(app, ["doctor"], catch_exceptions=False)


def test_hints_name_the_jobs_mapped_to_a_misnamed_source_and_never_a_source_that_is_right(thermal_rules):
    cat = default_catalog()
    seen = Observed()
    seen.add("gpus", "n1", ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"])  # jobs a and b, mapped to "gpus"
    seen.add("vllm", "n1", ["vllm:num_requests_waiting"])
    seen.add("other", "n1", ["foo"])
    assert job_hints(seen, cat, {"a": "gpus", "b": "gpus"}) == {"a": "dcgm", "b": "dcgm"}
    seen.hints = job_hints(seen, cat, {})
    assert seen.hints == {"gpus": "dcgm"}
    table = render_table(diagnose(load_rules(thermal_rules), seen))
    assert "\nhint: job 'gpus' carries dcgm metrics: map it: sources: {gpus: dcgm}" in table


async def test_on_the_prometheus_path_the_fixes_are_in_prometheus_yml_terms_and_grouped_per_source():
    """The default pack: one group per source to add or change, each saying what to put in prometheus.yml or
    ingest.yaml; agent.yaml only for what no exporter sends (the agent's own collectors), said so."""
    async with fake_prometheus() as (url, _):
        result = await doctor("--prometheus", url)
        data = json.loads((await doctor("--prometheus", url, "--format", "json")).output)
    out = result.output
    todo = out[out.index("to do, per source (the Prometheus path: prometheus.yml, ingest.yaml and the exporters):") :]
    assert (
        "    scrape dcgm-exporter (<node>:9400, /metrics) in prometheus.yml as job `dcgm` (a job of another "
        "name: map it in ingest.yaml, remote_write.grouping.sources: {<job>: dcgm})"
    ) in todo
    assert "\nvLLM (sending): " in todo and "\ndcgm-exporter: " in todo
    heads = [line for line in todo.splitlines()[1:] if line and not line.startswith(" ")][:-1]
    assert len(heads) == len({h.split(":")[0] for h in heads}) == len(data["to_do"])  # one group per source
    for group in data["to_do"]:
        text = " ".join(group["do"])
        if group["source"] in ("nvml", "netprobe", "streamprobe"):
            assert text.startswith("no exporter sends this; only the tailhound agent does"), group
        elif group["source"] != "capacity file":
            assert "agent.yaml" not in text, group
    assert data["path"] == "prometheus"
    rules = len(load_rules(default_rules_dir()).rules)
    assert len(out.splitlines()) < rules + 40  # one line per rule and a few per source; was per rule and signal: 135+
