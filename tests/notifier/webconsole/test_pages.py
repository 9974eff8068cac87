"""The console's pages: complete documents with nothing fetched, the data-testid hooks the browser tests and the
scripts use, the incident's facts, charts and notifications, the silences form, and everything escaped."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from tailhound.incident import Scope
from tailhound.notifier.matchers import Matcher, incident_labels, matches_all
from tailhound.notifier.webconsole.pages import incident_page, index_page, silence_matchers
from tailhound.notifier.webconsole.silences_page import silences_page
from tests.notifier.webconsole.factories import T0, kv_view, thermal_view
from tests.notifier.webconsole.markup import parse_page

NOW = T0 + 3600
HOSTILE = '<script>alert("x")</script>'


def _silences() -> list[dict]:
    base = dict(
        starts_at=NOW - 600,
        ends_at=NOW + 6600,
        author="ana",
        comment="fans",
        created_at=NOW - 600,
        expired_at=None,
        source="cli",
    )
    return [
        dict(base, id="sil-expired", matchers=['model="x"'], state="expired", expired_at=NOW - 60),
        dict(
            base, id="sil-active", matchers=['node="gpu-node-2"', 'root_cause="gpu-thermal-throttle"'], state="active"
        ),
        dict(base, id="sil-pending", matchers=['node="gpu-node-3"'], state="pending", starts_at=NOW + 60),
        dict(base, id="maint-1", matchers=['node=~"gpu-node-[45]"'], state="active", source="config"),
    ]


def test_index_lists_open_incidents_first_with_their_attributes():
    page = parse_page(index_page([thermal_view(), kv_view()], NOW, live=True))
    rows = page.by_testid("incident-row")
    assert [r.attrs["data-incident"] for r in rows] == ["inc-fedcba9876543210", "inc-0123456789abcdef"]
    kv, thermal = rows
    assert (kv.attrs["data-state"], kv.attrs["data-cause"], kv.attrs["data-severity"]) == (
        "open",
        "kv-cache-pressure",
        "warning",
    )
    assert (thermal.attrs["data-state"], thermal.attrs["data-cause"], thermal.attrs["data-severity"]) == (
        "resolved",
        "gpu-thermal-throttle",
        "critical",
    )
    text = page.text(thermal)
    assert "GPU thermal throttle" in text and "node gpu-node-2 / GPUs 3, 5 / model llama-3-70b" in text
    assert "persistent" in text and "6m 45s" in text and "2024-06-01 00:06:15 UTC" in text
    assert "transient" in page.text(kv) and "45m" in page.text(kv)  # open: aged to now
    assert "2 incidents" in page.text(page.one("incident-count"))


def test_index_has_filters_and_a_script_and_lists_everything_without_it():
    page = parse_page(index_page([thermal_view(), kv_view()], NOW, live=True))
    page.one("incident-filters")
    assert page.one("filter-text").attrs["name"] == "q"
    states = [e.attrs["value"] for e in page.elements if e.tag == "option"][:3]
    assert states == ["all", "open", "resolved"]
    assert page.one("filter-state").attrs["name"] == "state"
    assert page.one("filter-cause").attrs["name"] == "cause"
    assert page.one("filter-severity").attrs["name"] == "severity"
    values = {e.attrs["value"] for e in page.elements if e.tag == "option"}
    assert {"gpu-thermal-throttle", "kv-cache-pressure", "critical", "warning", "info"} <= values
    assert not any("hidden" in r.attrs for r in page.by_testid("incident-row"))
    assert "<script>" in page.html and "row.dataset.state" in page.html


def test_index_links_live_pages_or_report_anchors():
    live = parse_page(index_page([thermal_view()], NOW, live=True, base="/console"))
    hrefs = [e.attrs["href"] for e in live.elements if e.tag == "a"]
    assert "/console/incidents/inc-0123456789abcdef" in hrefs
    assert "/console" in hrefs and "/console/silences" in hrefs  # navigation
    offline = parse_page(index_page([thermal_view()], NOW, live=False))
    hrefs = [e.attrs["href"] for e in offline.elements if e.tag == "a"]
    assert hrefs == ["#inc-0123456789abcdef"]  # no navigation: there is no server


def test_index_without_incidents():
    page = parse_page(index_page([], NOW, live=True))
    assert page.by_testid("incident-row") == [] and "No incidents." in page.html


def test_incident_page_head_evidence_charts_actions():
    page = parse_page(incident_page(thermal_view(), NOW, live=True))
    art = page.one("incident")
    assert art.attrs["id"] == art.attrs["data-incident"] == "inc-0123456789abcdef"
    text = page.text(art)
    for expected in (
        "GPU thermal throttle",
        "critical",
        "resolved",
        "persistent",
        "GPUs 3, 5 on gpu-node-2 thermal throttling",
        "node gpu-node-2 / GPUs 3, 5 / model llama-3-70b",
        "2024-06-01 00:06:15 UTC",
        "2024-06-01 00:13:00 UTC",
        "6m 45s",
        "event #3",
        "gpu-thermal-throttle",
        "rules/gpu.yaml:6",
        "git:abc1234",
        "team=ml-platform",
    ):
        assert expected in text, expected
    evidence = page.text(page.one("evidence"))
    assert "gpu.temperature{gpu=3} = 90 C (>= 85 C) for 75s" in evidence
    assert "gpu.sm_clock{gpu=3} = 1100 MHz (< 1572 MHz)" in evidence
    series = page.by_testid("series")
    assert [s.attrs["data-signal"] for s in series] == ["gpu.temperature", "gpu.sm_clock"]
    assert len(page.by_testid("timeline-chart")) == 2 and len(page.by_testid("peer-chart")) == 2
    actions = [e for e in page.elements if e.tag == "li" and "airflow" in "".join(e.text)]
    assert actions and page.one("actions").tag == "ol"


def test_incident_page_notifications_and_why_held_back():
    view = thermal_view()
    view.suppressed = f"silenced by sil-1 ({HOSTILE})"
    page = parse_page(incident_page(view, NOW, live=True))
    rows = page.by_testid("notification-row")
    assert [(r.attrs["data-receiver"], r.attrs["data-outcome"]) for r in rows] == [
        ("pagerduty-oncall", "delivered"),
        ("slack-gpu", "retrying"),
    ]
    assert "HTTP 503 from hooks.slack.com" in page.text(rows[1]) and "#3" in page.text(rows[1])
    assert "—" in page.text(rows[1])  # not delivered yet
    assert "silenced by sil-1" in page.text(page.one("suppressed"))
    assert HOSTILE not in page.html


def test_silence_link_prefills_matchers_that_match_the_incident():
    view = thermal_view()
    page = parse_page(incident_page(view, NOW, live=True, base="/console"))
    href = page.one("silence-incident").attrs["href"]
    url = urlsplit(href)
    assert url.path == "/console/silences"
    matchers = parse_qs(url.query)["matcher"]
    assert matchers == ['node="gpu-node-2"', 'model="llama-3-70b"', 'root_cause="gpu-thermal-throttle"']
    parsed = [Matcher.parse(m) for m in matchers]
    assert matches_all(parsed, incident_labels(view.event))
    assert "silence-incident" not in incident_page(view, NOW, live=False)


def test_silence_matchers_quote_hostile_values_and_fall_back_to_the_rule():
    view = thermal_view()
    view.event = view.event.model_copy(update={"scope": Scope(node='gpu"node\\2')})
    (node, cause) = silence_matchers(view)
    assert Matcher.parse(node).value == 'gpu"node\\2'
    assert matches_all([Matcher.parse(node), Matcher.parse(cause)], incident_labels(view.event))
    view.event = view.event.model_copy(update={"scope": Scope()})
    assert silence_matchers(view) == ['rule="gpu-thermal-throttle"', 'root_cause="gpu-thermal-throttle"']


def test_incident_without_series_or_notifications():
    view = thermal_view(series=[])
    view.deliveries = []
    page = parse_page(incident_page(view, NOW, live=True))
    assert page.by_testid("timeline-chart") == [] and "No chart data" in page.html
    assert page.by_testid("notification-row") == [] and "No notifications recorded." in page.html
    page = parse_page(incident_page(kv_view(), NOW, live=True))
    assert "Open for" in page.html and page.by_testid("actions") == []


def test_hostile_incident_text_is_escaped_everywhere():
    view = thermal_view(incident=HOSTILE, node=HOSTILE, summary=HOSTILE)
    view.event = view.event.model_copy(
        update={"actions": [HOSTILE + " `rm -rf <x>`"], "labels": {HOSTILE: HOSTILE}, "rule_origin": HOSTILE}
    )
    for html in (
        incident_page(view, NOW, live=True),
        index_page([view], NOW, live=True),
        index_page([view], NOW, live=False),
    ):
        assert "<script>alert" not in html
        page = parse_page(html)
        assert any(r.attrs.get("data-incident") == HOSTILE for r in page.elements)
    page = parse_page(incident_page(view, NOW, live=True))
    assert "<code>rm -rf &lt;x&gt;</code>" in page.html  # backquoted commands as code, still escaped
    assert page.one("silence-incident").attrs["href"].startswith("/console/silences?matcher=node%3D%22%3Cscript")
    link = [e for e in parse_page(index_page([view], NOW, live=True)).elements if e.tag == "a"][-1]
    assert link.attrs["href"] == "/console/incidents/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E"


def test_silences_page_rows_and_expire_buttons():
    page = parse_page(silences_page(_silences(), NOW))
    rows = page.by_testid("silence-row")
    assert [r.attrs["data-silence"] for r in rows] == ["sil-active", "maint-1", "sil-pending", "sil-expired"]
    expire = {b.attrs["data-silence"] for b in page.by_testid("silence-expire")}
    assert expire == {"sil-active", "sil-pending"}  # not the config's window, not the expired one
    assert "node=&quot;gpu-node-2&quot;" in page.html and "maintenance window" in page.html
    assert "2024-06-01 02:50:00 UTC" in page.text(rows[0]) and "(in 1h 50m)" in page.text(rows[0])
    nav = [e.attrs["href"] for e in page.elements if e.tag == "a"]
    assert nav == ["/console", "/console/silences", "/console/capacity"]


def test_silences_form_hooks_prefill_and_script():
    page = parse_page(silences_page([], NOW, api="/notifier", prefill=['node="gpu-node-2"', HOSTILE]))
    form = page.one("silence-form")
    assert form.attrs["data-api"] == "/notifier"
    assert page.text(page.one("silence-matchers")) == 'node="gpu-node-2"\n' + HOSTILE
    assert page.one("silence-duration").attrs["value"] == "2h"
    assert page.one("silence-token").attrs["type"] == "password"
    for hook in ("silence-author", "silence-comment", "silence-preview-button", "silence-create-button"):
        page.one(hook)
    for hook in ("silence-error", "silence-preview", "silence-status"):
        assert "hidden" in page.one(hook).attrs
    assert page.by_testid("silence-row") == [] and "No silences." in page.html
    script = page.html[page.html.index("<script>") :]
    for needed in (
        "sessionStorage",
        "Authorization",
        "Bearer ",
        "/api/v1/silences/preview?",
        '"POST"',
        '"DELETE"',
        "fetch(",
        "textContent",
        "data.error",
    ):
        assert needed in script, needed
    assert "innerHTML" not in script and "<script>alert" not in page.html


def test_silences_page_survives_odd_entries():
    odd = [
        {"id": HOSTILE, "matchers": "not a list", "state": "active", "starts_at": "soon", "ends_at": None},
        {},
        {"id": "x", "matchers": [HOSTILE], "ends_at": 1e308, "state": "pending", "comment": HOSTILE},
    ]
    html = silences_page(odd, NOW)
    assert "<script>alert" not in html
    assert len(parse_page(html).by_testid("silence-row")) == 3
