"""`tailhound explain`: why this cause and not that one, from an incident's recorded candidates."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.errors import TailhoundError
from tailhound.incident import Candidate, Differential, Evidence, RuleFinding
from tailhound.notifier.explain import events_from_file, explain, pick
from tests.notifier.factories import incident_event

runner = CliRunner()
QUIET = RuleFinding(
    rule="queue-wait-scale-out",
    state="quiet",
    evidence=[Evidence(signal="gpu.dram_bw_util", value=0.56, op=">", threshold=0.75)],
)


def events(iid: str = "inc-00000000000000aa"):
    candidates = [
        Candidate(root_cause="retry-storm", score=1.0, supports=[RuleFinding(rule="retry-storm", state="firing")]),
        Candidate(
            root_cause="capacity",
            score=0.57,
            unexplained=["retry-storm"],
            supports=[RuleFinding(rule="capacity-exhausted", state="firing")],
            against=[QUIET],
        ),
        Candidate(
            root_cause="kv-cache-pressure", score=0.0, supports=[RuleFinding(rule="kv-cache-full", state="pending")]
        ),
    ]
    diff = Differential(
        lead="retry-storm",
        runner_up="capacity",
        why="Counters export the sum.",
        check="Compare the 429 rate per client IP at the ingress.",
    )
    opened = incident_event(incident_id=iid, root_cause="retry-storm", candidates=candidates, differential=diff)
    resolved = incident_event(
        incident_id=iid, event="resolved", sequence=2, ts=opened.ts + 600, root_cause="retry-storm", differential=diff
    )
    return [opened, resolved]


def test_it_says_why_the_lead_and_not_each_other_candidate():
    text = explain(events())
    assert "NOT CERTAIN: retry-storm or capacity" in text and "event #1 explained" in text
    assert "Why retry-storm and not capacity:" in text
    assert "capacity does not explain retry-storm" in text
    assert "queue-wait-scale-out quiet: gpu.dram_bw_util = 0.56 (> 0.75)" in text
    assert "the signals cannot rule capacity out: Compare the 429 rate per client IP" in text
    assert "no rule of kv-cache-pressure fires (kv-cache-full pending)" in text


def test_versus_names_one_candidate_and_refuses_one_that_is_not():
    text = explain(events(), versus="kv-cache-pressure")
    assert "not kv-cache-pressure" in text and "not capacity:" not in text
    with pytest.raises(TailhoundError, match="not a candidate"):
        explain(events(), versus="nvlink-degraded")


def test_an_incident_without_candidates_says_so():
    assert "recorded no candidates" in explain([incident_event()])


def test_pick_by_id_or_prefix_and_refuse_an_ambiguous_one():
    both = events("inc-00000000000000aa") + events("inc-00000000000000ab")
    assert {e.incident_id for e in pick(both, "inc-00000000000000ab")} == {"inc-00000000000000ab"}
    with pytest.raises(TailhoundError, match="2 incidents match"):
        pick(both, "inc-0000")
    with pytest.raises(TailhoundError, match="no incident inc-ff"):
        pick(both, "inc-ff")


def test_files_of_json_lines_a_list_or_one_event(tmp_path):
    evs = events()
    lines = tmp_path / "replay.jsonl"
    lines.write_text("\n".join(e.model_dump_json() for e in evs) + '\nnot json\n{"other": 1}\n')
    assert [e.sequence for e in events_from_file(lines)] == [1, 2]
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([e.model_dump(mode="json") for e in evs], indent=2))
    assert len(events_from_file(listed)) == 2
    one = tmp_path / "one.json"
    one.write_text(evs[0].model_dump_json(indent=2))
    assert len(events_from_file(one)) == 1


def test_the_command_reads_a_replay_file(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(e.model_dump_json() for e in events()) + "\n")
    result = runner.invoke(app, ["explain", "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert "Why retry-storm and not capacity:" in result.output
    result = runner.invoke(app, ["explain", "inc-nope", "--file", str(path)])
    assert result.exit_code != 0
