"""The incident page's differential-diagnosis panel: the look-alike with its check, the ranked candidates."""

from __future__ import annotations

from tailhound.incident import Candidate, Differential, Evidence, RuleFinding
from tailhound.notifier.webconsole.pages import incident_page
from tests.notifier.webconsole.factories import T0, thermal_view
from tests.notifier.webconsole.markup import parse_page

NOW = T0 + 3600
HOSTILE = '<script>alert("x")</script>'


def ambiguous_view(check: str = "Compare the 429 rate per client IP at the ingress."):
    view = thermal_view()
    quiet = RuleFinding(
        rule="queue-wait-scale-out",
        state="quiet",
        evidence=[Evidence(signal="gpu.dram_bw_util", value=0.56, op=">", threshold=0.75)],
    )
    view.event = view.event.model_copy(
        update={
            "event": "updated",
            "root_cause": "retry-storm",
            "candidates": [
                Candidate(
                    root_cause="retry-storm", score=1.0, supports=[RuleFinding(rule="retry-storm", state="firing")]
                ),
                Candidate(
                    root_cause="capacity",
                    score=0.57,
                    unexplained=["retry-storm"],
                    against=[quiet],
                    supports=[RuleFinding(rule="capacity-exhausted", state="firing")],
                ),
            ],
            "differential": Differential(
                lead="retry-storm", runner_up="capacity", why="Counters export the sum.", check=check
            ),
        }
    )
    return view


def test_the_panel_names_the_runner_up_the_check_and_each_candidates_evidence():
    page = parse_page(incident_page(ambiguous_view(), NOW, live=True))
    diff = page.text(page.one("differential"))
    assert "Not certain: retry-storm or capacity." in diff and "Compare the 429 rate per client IP" in diff
    rows = [page.text(r) for r in page.by_testid("candidate")]
    assert len(rows) == 2 and "retry-storm" in rows[0] and "1.00" in rows[0]
    assert "capacity-exhausted firing" in rows[1] and "queue-wait-scale-out quiet: gpu.dram_bw_util = 0.56" in rows[1]
    assert ' style="' not in page.html.split('data-testid="differential"')[1].split("</table>")[0]  # CSS classes


def test_without_candidates_the_panel_points_to_explain():
    page = parse_page(incident_page(thermal_view(), NOW, live=True))
    assert not page.by_testid("candidates") and "tailhound explain inc-0123456789abcdef" in page.html


def test_the_check_is_escaped():
    html = incident_page(ambiguous_view(check=HOSTILE), NOW, live=True)
    assert "<script>alert" not in html and "&lt;script&gt;" in html
