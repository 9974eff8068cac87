"""The incident console's routes on the notifier API, without a broker: the incidents list and detail (open
and recent groups, chart data only in the detail), the silence preview (matches, errors, bounds) and the
HTML pages with their security headers."""

from __future__ import annotations

import pytest

from tailhound.notifier.api import ApiAccess
from tailhound.notifier.limits import MAX_PREVIEW_MATCHES
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.webconsole.routes import SECURITY_HEADERS, preview
from tests.notifier.factories import T0, incident_event

from .api_helpers import KV, NOW, OLD, THERMAL, TOKEN, FakeService, api, bearer, fetch, populated_notifier


# --- GET /api/v1/incidents ------------------------------------------------------------------------------------
async def test_the_list_has_open_and_recent_incidents_open_first_without_chart_data():
    async with api() as (_, base):
        status, headers, body = await fetch(base, "/api/v1/incidents")
    assert status == 200 and headers["X-Total-Count"] == "3"
    assert [(i["incident_id"], i["state"]) for i in body] == [(KV, "open"), (THERMAL, "open"), (OLD, "resolved")]
    kv, thermal, old = body
    assert thermal["root_cause"] == thermal["cause"] == "gpu-thermal-throttle" and thermal["id"] == THERMAL
    assert thermal["severity"] == "critical"
    assert thermal["group_id"] == THERMAL and thermal["scope"]["node"] == "gpu-node-3"
    assert old["resolved_at"] == T0 - 3900 and old["group_id"] == OLD
    assert {
        "id",
        "cause",
        "severity",
        "scope",
        "summary",
        "opened_at",
        "resolved_at",
        "transient",
        "state",
        "group_id",
    } <= set(thermal)
    assert "series" not in thermal and "evidence" not in thermal
    assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    ("query", "ids"),
    [
        ("?state=open", [KV, THERMAL]),
        ("?state=resolved", [OLD]),
        ("?state=all&cause=network-path", [OLD]),
        ("?severity=critical", [THERMAL]),
        ("?q=kv%20CACHE", [KV]),
        ("?q=gpu-node-9", [OLD]),  # the scope
        ("?limit=1", [KV]),
        ("?limit=100000", [KV, THERMAL, OLD]),  # capped, not refused
    ],
)
async def test_the_list_filters(query, ids):
    async with api() as (_, base):
        status, headers, body = await fetch(base, "/api/v1/incidents" + query)
    assert status == 200 and [i["incident_id"] for i in body] == ids
    assert headers["X-Total-Count"] == str(3 if "limit" in query else len(ids))


@pytest.mark.parametrize("query", ["?state=closed", "?limit=0", "?limit=ten"])
async def test_bad_list_queries_are_400(query):
    async with api() as (_, base):
        status, _, body = await fetch(base, "/api/v1/incidents" + query)
    assert status == 400 and body["error"]


# --- GET /api/v1/incidents/{id} --------------------------------------------------------------------------------
async def test_an_open_incident_in_full_with_series_marks_and_deliveries():
    async with api() as (_, base):
        status, _, body = await fetch(base, f"/api/v1/incidents/{THERMAL}")
    assert status == 200 and body["state"] == "open" and body["group_id"] == THERMAL
    assert body["incident"]["series"][0]["signal"] == "gpu.temperature"
    assert body["marks"] == [{"ts": T0, "kind": "opened", "sequence": 1}]
    (row,) = body["deliveries"]
    assert row == {
        "receiver": "slack",
        "sequence": 1,
        "kind": "opened",
        "created_at": T0 + 10,
        "at": None,
        "outcome": "retrying",
        "attempts": 1,
        "error": "HTTP 503 from hooks.slack.com",
        "flapping": False,
    }
    assert body["group"]["live"] is True and body["group"]["incidents"] == [THERMAL]


async def test_a_recent_incident_in_full():
    async with api() as (_, base):
        status, _, body = await fetch(base, f"/api/v1/incidents/{OLD}")
    assert status == 200 and body["state"] == "resolved" and body["group"]["live"] is False
    assert [m["kind"] for m in body["marks"]] == ["opened", "resolved"]
    assert [(d["kind"], d["outcome"]) for d in body["deliveries"]] == [
        ("opened", "delivered"),
        ("resolved", "delivered"),
    ]


async def test_an_unknown_incident_is_404():
    async with api() as (_, base):
        status, _, body = await fetch(base, "/api/v1/incidents/inc-nope")
    assert status == 404 and "inc-nope" in body["error"]


# --- GET /api/v1/silences/preview -------------------------------------------------------------------------------
async def test_the_preview_lists_what_a_silence_would_match_now():
    async with api() as (_, base):
        status, _, body = await fetch(
            base, '/api/v1/silences/preview?matcher=root_cause%3D~"gpu-.*|network-path"&matcher=severity!%3D"info"'
        )
    assert status == 200 and body["errors"] == [] and body["total"] == 2
    assert body["matches"] == [
        {
            "incident_id": THERMAL,
            "summary": incident_event().summary,
            "root_cause": "gpu-thermal-throttle",
            "severity": "critical",
            "state": "open",
            "group_id": THERMAL,
        },
        {
            "incident_id": OLD,
            "summary": incident_event(node="gpu-node-9").summary,
            "root_cause": "network-path",
            "severity": "warning",
            "state": "resolved",
            "group_id": OLD,
        },
    ]


@pytest.mark.parametrize(
    ("matchers", "says"),
    [
        ([], "at least one matcher"),
        (['node="a"'] * 17, "at most 16 matchers"),
        (["node"], "invalid matcher 'node'"),
        (['node=~"(a)\\\\1"'], "invalid regular expression"),
        (['node="' + "x" * 1000 + '"'] * 5, "characters together"),
    ],
)
def test_preview_errors_are_listed_with_no_matches(matchers, says):
    out = preview(populated_notifier(), matchers, NOW)
    assert out["matches"] == [] and out["total"] == 0
    assert len(out["errors"]) >= 1 and says in out["errors"][0], out["errors"]


async def test_preview_errors_come_as_200_with_errors_over_http():
    async with api() as (_, base):
        status, _, body = await fetch(base, "/api/v1/silences/preview?matcher=node&matcher=severity%3D%22info%22")
    assert status == 200 and body["matches"] == [] and len(body["errors"]) == 1 and "node" in body["errors"][0]


def test_preview_reports_at_most_100_matches_with_the_total():
    nf = Notifier(populated_notifier().config)
    nf.ingest([incident_event(incident_id=f"inc-{i:016d}", ts=T0 + i) for i in range(MAX_PREVIEW_MATCHES + 20)], T0)
    out = preview(nf, ['node="gpu-node-3"'], NOW)
    assert out["total"] == MAX_PREVIEW_MATCHES + 20 and len(out["matches"]) == MAX_PREVIEW_MATCHES
    assert out["matches"][0]["incident_id"] == f"inc-{0:016d}"  # all opened together: by id


# --- console pages -----------------------------------------------------------------------------------------------
def assert_console_headers(headers: dict[str, str]) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert headers[name] == value, name
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]


@pytest.mark.parametrize(
    "path",
    [
        "/console",
        f"/console/incidents/{THERMAL}",
        f"/console/incidents/{OLD}",
        "/console/silences",
        '/console/silences?matcher=node%3D"gpu-node-3"',
    ],
)
async def test_console_pages_are_html_with_the_security_headers(path):
    async with api() as (_, base):
        status, headers, body = await fetch(base, path)
    assert status == 200, body
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert_console_headers(headers)
    assert body.lstrip().lower().startswith("<!doctype html")


async def test_console_pages_show_the_incidents():
    async with api() as (_, base):
        _, _, index = await fetch(base, "/console")
        _, _, page = await fetch(base, f"/console/incidents/{THERMAL}")
        _, _, silences = await fetch(base, '/console/silences?matcher=node%3D"gpu-node-3"')
    assert THERMAL in index and KV in index
    assert THERMAL in page and "<svg" in page
    assert "gpu-node-3" in silences


async def test_an_unknown_incident_page_is_404_html():
    async with api() as (_, base):
        status, headers, body = await fetch(base, "/console/incidents/inc-<script>")
    assert status == 404 and "<script>" not in body and "&lt;script&gt;" in body
    assert_console_headers(headers)


async def test_the_root_redirects_to_the_console():
    async with api() as (_, base):
        status, headers, _ = await fetch(base, "/")
    assert status == 302 and headers["Location"] == "/console"


async def test_the_console_can_be_turned_off_leaving_the_json_api():
    async with api(console=False) as (_, base):
        assert (await fetch(base, "/console"))[0] == 404
        assert (await fetch(base, "/console/login"))[0] == 404
        assert (await fetch(base, "/"))[0] == 404
        assert (await fetch(base, "/api/v1/incidents"))[0] == 200


async def test_json_answers_carry_the_security_headers_too():
    async with api(ApiAccess(token=TOKEN.encode())) as (_, base):
        status, headers, _ = await fetch(base, "/api/v1/silences", headers=bearer())
    assert status == 200
    assert_console_headers(headers)


async def test_an_empty_notifier_has_an_empty_list():
    async with api(service=FakeService(Notifier(populated_notifier().config))) as (_, base):
        status, headers, body = await fetch(base, "/api/v1/incidents")
    assert status == 200 and body == [] and headers["X-Total-Count"] == "0"
