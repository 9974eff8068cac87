"""The offline replay report: one self-contained file (nothing fetched), the incident list linking to every
incident's section, each with its charts, and no silences UI."""

from __future__ import annotations

from tailhound.notifier.webconsole.report import render_report, report_title
from tests.notifier.webconsole.factories import T0, kv_view, thermal_view
from tests.notifier.webconsole.markup import EXTERNAL, parse_page

END = T0 + 3600


def test_report_links_every_incident_to_its_section_with_charts():
    views = [thermal_view(), kv_view()]
    html = render_report(views, title="replay of fleet.jsonl", generated_at=END)
    page = parse_page(html)  # well-formed, doctype, no reference to another site
    sections = {a.attrs["id"]: a for a in page.by_testid("incident")}
    assert list(sections) == ["inc-0123456789abcdef", "inc-fedcba9876543210"]
    links = {a.attrs["href"] for a in page.elements if a.tag == "a" and a.attrs.get("href", "").startswith("#inc-")}
    assert links == {f"#{iid}" for iid in sections}
    assert html.index('data-testid="incident-table"') < html.index('data-testid="incident"')  # list on top
    assert len(page.by_testid("timeline-chart")) == 2 and len(page.by_testid("peer-chart")) == 2
    assert "No chart data" in page.text(sections["inc-fedcba9876543210"])
    assert [r.attrs["data-incident"] for r in page.by_testid("incident-row")] == [
        "inc-fedcba9876543210",
        "inc-0123456789abcdef",
    ]
    assert "replay of fleet.jsonl" in page.text(page.one("report-title"))
    assert "2024-06-01 01:00:00 UTC" in html  # ages as of the end of the recording


def test_report_is_self_contained_and_has_no_server_ui():
    html = render_report([thermal_view()], title="t", generated_at=END)
    page = parse_page(html)
    assert not EXTERNAL.search(html)
    assert all(e.tag not in ("img", "iframe", "object", "embed") for e in page.elements)
    assert all(e.attrs.get("rel") != "stylesheet" and "src" not in e.attrs for e in page.elements)
    for hook in ("silence-form", "silence-incident", "silence-expire"):
        assert page.by_testid(hook) == []
    assert "/console" not in html and "fetch(" not in html
    page.one("incident-filters")  # the list's filters work from disk: the script is inline
    assert "<style>" in html and "<script>" in html


def test_report_escapes_its_title_and_is_deterministic():
    title = '<script>alert("t")</script>'
    a = render_report([thermal_view(), kv_view()], title=title, generated_at=END)
    b = render_report([thermal_view(), kv_view()], title=title, generated_at=END)
    assert a == b
    assert "<script>alert" not in a
    parse_page(a)


def test_report_of_a_replay_without_incidents():
    page = parse_page(render_report([], title="replay of quiet.jsonl", generated_at=END))
    assert page.by_testid("incident") == [] and "No incidents." in page.html


def test_report_title():
    assert report_title(["fleet.jsonl"]) == "replay of fleet.jsonl"
    assert report_title(["a.jsonl", "b.jsonl", "c.jsonl"]) == "replay of a.jsonl and 2 more"
    assert report_title([]) == "replay"
