"""The differential (lead, runner-up, the check) in what receivers send: title, Slack, PagerDuty, webhooks."""

from __future__ import annotations

from tailhound.incident import Candidate, Differential, RuleFinding
from tailhound.notifier.receivers.pagerduty import custom_details
from tailhound.notifier.receivers.slack_blocks import render_message
from tailhound.notifier.receivers.webhook import build_payload, requested_action
from tests.notifier.factories import incident_event, notification
from tests.notifier.slack_server import validate_blocks

CHECK = "Compare the 429 rate per client IP at the ingress <now> & an hour ago"


def ambiguous():
    return incident_event(
        root_cause="retry-storm",
        rule="retry-storm",
        candidates=[
            Candidate(root_cause="retry-storm", score=1.0, supports=[RuleFinding(rule="retry-storm", state="firing")]),
            Candidate(root_cause="capacity", score=0.53, unexplained=["retry-storm"]),
        ],
        differential=Differential(
            lead="retry-storm", runner_up="capacity", why="Counters export the sum.", check=CHECK
        ),
    )


def test_the_title_names_the_lead_and_the_runner_up():
    assert notification(incidents=[ambiguous()]).title().startswith("[FIRING] retry-storm or capacity?: ")
    assert notification().title().startswith("[FIRING] gpu-thermal-throttle: ")  # no look-alike: as before


def test_slack_shows_the_differential_escaped_and_valid():
    _, blocks = render_message(notification(incidents=[ambiguous()]))
    assert validate_blocks(blocks) == []
    text = "\n".join(b["text"]["text"] for b in blocks if b.get("text"))
    assert "*Not certain: retry-storm or capacity*" in text
    assert "*Tell them apart:* Compare the 429 rate per client IP at the ingress &lt;now&gt; &amp; an hour" in text
    _, plain = render_message(notification())
    assert "Not certain" not in str(plain)


def test_pagerduty_details_carry_the_differential_and_the_ranked_candidates():
    details = custom_details(notification(incidents=[ambiguous()]))
    assert details["differential"]["runner_up"] == "capacity" and details["differential"]["check"] == CHECK
    assert details["candidates"] == [
        {"root_cause": "retry-storm", "score": 1.0},
        {"root_cause": "capacity", "score": 0.53},
    ]
    assert "differential" not in custom_details(notification())


def test_a_webhook_is_told_the_cause_is_not_certain():
    action = requested_action(ambiguous())
    assert action["certain"] is False and action["runner_up"] == "capacity" and action["check"] == CHECK
    assert "certain" not in requested_action(incident_event())
    payload = build_payload(notification(incidents=[ambiguous()]))
    assert payload["incident"]["differential"]["runner_up"] == "capacity"
    assert [c["root_cause"] for c in payload["incident"]["candidates"]] == ["retry-storm", "capacity"]


def test_the_terminal_panel_shows_the_differential():
    from rich.console import Console

    from tailhound.console import render_incident

    console = Console(width=400, record=True, color_system=None)
    console.print(render_incident(ambiguous()))
    text = console.export_text()
    assert "not certain  retry-storm or capacity: Counters export the sum." in text and CHECK in text
    console.print(render_incident(incident_event()))
    assert console.export_text().count("not certain") == 0  # export_text clears: the second panel alone


def test_alertmanager_description_names_the_runner_up_and_the_check():
    from tailhound.notifier.receivers.alertmanager_alerts import alert_annotations

    n = notification(incidents=[ambiguous()])
    description = alert_annotations(n.lead, n)["description"]
    assert "Not certain: retry-storm or capacity. Counters export the sum." in description
    assert f"Tell them apart: {CHECK}" in description
    plain = notification()
    assert "Not certain" not in alert_annotations(plain.lead, plain)["description"]
