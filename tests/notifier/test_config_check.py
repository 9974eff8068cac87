"""`tailhound notifier check`: every problem of every file at its line and column with a hint, matchers and
labels against what incidents carry, warnings, GitHub annotations and exit codes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.notifier.config_check import (
    WarningProblem,
    check_file,
    check_text,
    fixed_labels,
    is_error,
    label_issues,
    label_space,
    matcher_issues,
)
from tailhound.notifier.matchers import Matcher
from tailhound.resources import default_rules_dir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tailhound" / "examples"
runner = CliRunner()


@pytest.fixture(scope="module")
def space():
    found, problems = label_space(default_rules_dir())
    assert problems == []
    return found


def check(space, text: str, tail: str = "") -> list[tuple[int | None, int | None, str, str]]:
    """(line, column, message, hint) of every problem of `text` (dedented) followed by `tail`."""
    found = check_text(textwrap.dedent(text).lstrip("\n") + tail.lstrip("\n"), "n.yaml", space)
    return [(p.line, p.column, p.message, p.hint) for p in found.problems]


def where(problems) -> list[tuple[int | None, int | None]]:
    return [(line, col) for line, col, _, _ in problems]


RECEIVERS = """
receivers:
  - {type: console, name: console}
  - {type: console, name: pager}
"""


# --- the labels incidents carry ----------------------------------------------------------------------------
def test_fixed_labels_are_those_incidents_carry():
    assert fixed_labels() == {
        "root_cause",
        "severity",
        "rule",
        "transient",
        "incident",
        "node",
        "engine",
        "model",
        "endpoint",
        "gpus",
        "nodes",
        "rules",
    }


def test_the_rule_pack_adds_its_labels_and_closes_the_rule_names(space, tmp_path):
    assert "team" in space.names and "gpu-thermal-throttle" in space.values["rule"]
    assert space.values["severity"] == ("info", "warning", "critical")
    assert "capacity" in space.values["root_cause"] and space.values["transient"] == ("true", "false")
    (tmp_path / "mine.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n      - name: hot\n        labels: {owner: gpu-team}\n"
    )
    mine, problems = label_space(tmp_path)
    assert problems == [] and "owner" in mine.names and "team" not in mine.names
    assert mine.values["rule"] == ("hot",)
    (tmp_path / "broken.yaml").write_text("groups: [\n")
    open_rules, _ = label_space(tmp_path)
    assert "rule" not in open_rules.values  # a file that cannot be read: rule names stay open, never a false alarm
    bare, _ = label_space(None)
    assert "team" not in bare.names and "rule" not in bare.values
    assert label_space(tmp_path / "nope")[1][0].message == "no such rules directory"


# --- the shipped examples --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["notifier.yaml", "notifier-production.yaml"])
def test_shipped_examples_have_no_problem(space, name):
    checked = check_file(EXAMPLES / name, space)
    assert checked.problems == [] and checked.config is not None


# --- YAML and structure ----------------------------------------------------------------------------------------
def test_invalid_yaml_at_its_line_and_column(space):
    assert check(space, "route:\n  receiver: [console\n") == [
        (3, 1, "invalid YAML: expected ',' or ']', but got '<stream end>'", "")
    ]


def test_not_a_mapping(space):
    assert check(space, "- route\n") == [
        (1, 1, "a notifier config is a mapping (grouping, route, receivers, inhibit_rules, ...)", "")
    ]


def test_an_empty_file_is_the_defaults(space):
    assert check(space, "") == [] and check(space, "# nothing\n") == []


def test_duplicate_keys_at_the_second_one(space):
    assert check(
        space,
        """
        grouping:
          wait: 30s
          wait: 5m
        """,
    ) == [(3, 3, "duplicate key 'wait'", "first at line 2; YAML keeps only the last one")]


def test_every_structure_problem_at_once_with_the_nearest_key(space):
    found = check(
        space,
        """
        grouping:
          wiat: 30s
        flap: {window: 20m, max_flips: 0}
        route:
          receiver: console
          contineu: true
        receivers:
          - type: slack
            name: console
            token: xoxb-inline
            chanel: "#x"
          - type: slak
            name: other
          - name: typeless
        inhibit_rules:
          - target_matchers: ['severity="warning"']
        """,
    )
    assert found == [
        (2, 3, "grouping: unknown key 'wiat'", "did you mean 'wait'?"),
        (3, 32, "flap.max_flips: Input should be greater than or equal to 1", ""),
        (6, 3, "route: unknown key 'contineu'", "did you mean 'continue'?"),
        (10, 12, "receivers[0].token: secrets are never written inline; use {env: VARIABLE} or {file: /path}", ""),
        (11, 5, "receivers[0]: unknown key 'chanel'", "did you mean 'channel'?"),
        (12, 11, "receivers[1]: unknown receiver type 'slak'", "did you mean 'slack'?"),
        (14, 5, "receivers[2]: missing key 'type'", "receiver types: console, slack, pagerduty, webhook, alertmanager"),
        (16, 5, "inhibit_rules[0]: missing key 'source_matchers'", ""),
    ]


def test_invalid_matcher_and_maintenance_times_at_their_node(space):
    found = check(
        space,
        """
        route:
          receiver: console
          routes:
            - matchers: ['sev~x']
        maintenance:
          - matchers: ['node="gpu-node-7"']
            starts_at: 2026-12-01T06:00:00Z
            ends_at: 2026-12-01T02:00:00Z
            author: ana
            comment: CHG-1
        """,
    )
    assert found == [
        (
            4,
            18,
            "route.routes[0].matchers[0]: invalid matcher 'sev~x': write name=\"value\" (operators = != =~ !~)",
            "",
        ),
        (8, 14, "maintenance[0]: ends_at must be after starts_at", ""),
    ]


# --- matchers against the labels incidents carry ---------------------------------------------------------------
def test_a_misspelled_label_and_value_are_both_reported(space):
    found = check(
        space,
        """
        route:
          receiver: console
          routes:
            - matchers: ['severty="critcal"']
              receiver: pager
        """,
        RECEIVERS,
    )
    assert found == [
        (
            4,
            19,
            "route.routes[0].matchers[0]: no incident carries the label 'severty', so severty=\"critcal\" never "
            "matches",
            "did you mean 'severity'?",
        ),
        (
            4,
            28,
            "route.routes[0].matchers[0]: 'critcal' is not a valid severity, so severty=\"critcal\" never matches",
            "did you mean 'critical'?",
        ),
    ]


@pytest.mark.parametrize(
    ("matcher", "col", "message", "hint"),
    [
        (
            'root_cause="capacty"',
            36,
            "'capacty' is not a valid root_cause, so root_cause=\"capacty\" never matches",
            "did you mean 'capacity'?",
        ),
        (
            'severity!="critcal"',
            35,
            "'critcal' is not a valid severity, so severity!=\"critcal\" always matches",
            "did you mean 'critical'?",
        ),
        (
            'transient="yes"',
            35,
            "'yes' is not a valid transient, so transient=\"yes\" never matches",
            "transient values: false, true",
        ),
        (
            'rule="gpu-thermal-throtle"',
            30,
            "'gpu-thermal-throtle' is not a valid rule, so rule=\"gpu-thermal-throtle\" never matches",
            "did you mean 'gpu-thermal-throttle'?",
        ),
        (
            'severity=""',
            34,
            'every incident has a severity, so severity="" never matches',
            "severity values: critical, info, warning",
        ),
        (
            'severity=~"crit"',
            35,
            'the pattern matches no valid severity, so severity=~"crit" never matches',
            "severity values: critical, info, warning",
        ),
        (
            'severity!~"warn.*|info.*|crit"',
            49,
            "'crit' is not a valid severity, so that alternative of severity!~\"warn.*|info.*|crit\" never matches",
            "severity values: critical, info, warning",
        ),
        (
            'severity=~"warn.*|crti.*"',
            42,
            "'crti.*' matches no valid severity, so that alternative of severity=~\"warn.*|crti.*\" never matches",
            "severity values: critical, info, warning",
        ),
        (
            'root_cause=~"capacity|retry-strom"',
            46,
            "'retry-strom' is not a valid root_cause, so that alternative of "
            'root_cause=~"capacity|retry-strom" never matches',
            "did you mean 'retry-storm'?",
        ),
        (
            'root_cause!~"gpu-.*x"',
            37,
            'the pattern matches no valid root_cause, so root_cause!~"gpu-.*x" always matches',
            "root_cause values",
        ),
        (
            "owner=gpu-team",
            24,
            "no incident carries the label 'owner', so owner=\"gpu-team\" never matches",
            "labels: endpoint, engine, gpus, incident, model, node, nodes, root_cause, rule, rules, severity, team, "
            "transient",
        ),
        ('node!="gpu-node-7"', None, None, None),
        ('team="ml-platform"', None, None, None),
        ('root_cause=~"gpu-.*"', None, None, None),
        ('severity=~"warning|critical"', None, None, None),
        ('root_cause=~"gpu-.*|capacity"', None, None, None),
        ('endpoint!=""', None, None, None),
        ('severity!=""', None, None, None),
    ],
    ids=lambda v: v if isinstance(v, str) and "=" in v else None,
)
def test_matcher_checks_at_the_label_or_value(space, matcher, col, message, hint):
    text = "inhibit_rules:\n  - source_matchers: ['" + matcher + "']\n    target_matchers: ['node!=\"\"']\n"
    found = check(space, text)
    if message is None:
        assert found == []
    else:
        prefix = "inhibit_rules[0].source_matchers[0]: "
        assert found[0][:3] == (2, col, prefix + message) and found[0][3].startswith(hint)
        assert len(found) == 1


def test_matcher_positions_in_double_quotes_plain_objects_and_escapes(space):
    found = check(
        space,
        r"""
        maintenance:
          - matchers:
              - "severity=\"critcal\""
              - severity=critcal
              - {name: severity, op: "=", value: critcal}
              - 'sevrity="critical"'
            starts_at: 2026-12-01T02:00:00Z
            ends_at: 2026-12-01T06:00:00Z
            author: ana
            comment: CHG-1
        """,
    )
    assert where(found) == [(3, 9), (4, 18), (5, 42), (6, 10)]
    assert all("maintenance[0].matchers[" in msg for _, _, msg, _ in found)


def test_matchers_on_a_label_of_a_custom_rule_pack(tmp_path):
    (tmp_path / "r.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n      - name: hot\n        labels: {owner: gpu-team}\n"
    )
    mine, _ = label_space(tmp_path)
    assert matcher_issues(Matcher.parse('owner="gpu-team"'), mine) == []
    assert matcher_issues(Matcher.parse('rule="hot"'), mine) == []
    assert [i.message for i in matcher_issues(Matcher.parse('rule="gpu-thermal-throttle"'), mine)] == [
        "'gpu-thermal-throttle' is not a valid rule, so rule=\"gpu-thermal-throttle\" never matches"
    ]


def test_label_issues_for_command_line_labels(space):
    assert label_issues("severty", "critcal", space) == [
        ("no incident carries the label 'severty'", "did you mean 'severity'?"),
        ("'critcal' is not a valid severity", "did you mean 'critical'?"),
    ]
    assert label_issues("node", "anything", space) == [] and label_issues("team", "x", space) == []


def test_grouping_and_inhibit_equal_labels_must_exist(space):
    found = check(
        space,
        """
        grouping:
          by: [root_cause, nod]
        inhibit_rules:
          - source_matchers: ['root_cause="network-path"']
            target_matchers: ['root_cause="capacity"']
            equal: [endpiont, model]
        """,
    )
    assert found == [
        (
            2,
            20,
            "grouping.by[1]: no incident carries the label 'nod' (it is \"\" on every incident, so it never "
            "splits a group)",
            "did you mean 'node'?",
        ),
        (
            6,
            13,
            "inhibit_rules[0].equal[0]: no incident carries the label 'endpiont' (it is \"\" on every incident, "
            "so it is always equal)",
            "did you mean 'endpoint'?",
        ),
    ]


# --- receivers and reachability --------------------------------------------------------------------------------
def test_receivers_named_by_routes_exist_at_the_routes_line(space):
    found = check(
        space,
        """
        route:
          receiver: console
          routes:
            - matchers: ['severity="critical"']
              receiver: pagr
              routes:
                - matchers: ['team="ml-platform"']
                  receiver: nobody
        """,
        RECEIVERS,
    )
    assert found == [
        (5, 17, "route.routes[0].receiver: no receiver named 'pagr'", "did you mean 'pager'?"),
        (8, 21, "route.routes[0].routes[0].receiver: no receiver named 'nobody'", "receivers: console, pager"),
    ]  # and not the model's own first-error message at line 1


def test_receiver_names_twice_and_a_top_route_without_receiver(space):
    found = check(
        space,
        """
        route:
          routes: []
        receivers:
          - {type: console, name: a}
          - {type: console, name: a}
        """,
    )
    assert found == [
        (1, 1, "route: the top-level route needs a receiver (the default for unmatched incidents)", "receivers: a"),
        (5, 27, "receivers[1].name: receiver 'a' is defined twice", "first at line 4"),
    ]
    assert where(check(space, "receivers: [{type: console, name: a}]\n")) == [(1, 1)]  # default route: console


def test_a_route_after_a_catch_all_is_a_warning(space):
    found = check_text(
        textwrap.dedent("""\
        route:
          receiver: console
          matchers: ['severity="critical"']
          routes:
            - receiver: pager
              continue: true
            - receiver: console
            - matchers: ['severity="critical"']
              receiver: pager
            - receiver: pager
        """)
        + RECEIVERS.lstrip("\n"),
        "n.yaml",
        space,
    ).problems
    assert [(p.line, p.column, type(p)) for p in found] == [
        (3, 13, WarningProblem),
        (8, 7, WarningProblem),
        (10, 7, WarningProblem),
    ]
    assert found[0].message == ("route.matchers: the top-level route takes every incident; its matchers are never read")
    assert found[1].message == (
        "route.routes[2]: never reached: route.routes[1] (line 7) has no matchers and no "
        "`continue: true`, so it takes every incident first"
    )
    assert not any(map(is_error, found))
    assert found[1].text().startswith("n.yaml:8:7: warning: route.routes[2]: never reached")
    assert (
        found[1]
        .github("tailhound notifier check")
        .startswith("::warning file=n.yaml,line=8,col=7,title=tailhound notifier check::route.routes[2]: never reached")
    )


def test_a_broken_file_still_has_its_labels_checked(space):
    """One structure error hides nothing else: every problem of the file at once."""
    found = check(
        space,
        """
        grouping: {by: [nod], wiat: 1s}
        route:
          receiver: pager
          routes:
            - matchers: ['severty="critical"']
        receivers:
          - {type: console, name: console, extra: 1}
        """,
    )
    assert where(found) == [(1, 17), (1, 23), (3, 13), (5, 19), (7, 36)]


# --- the command ---------------------------------------------------------------------------------------------------
BAD = """\
route:
  receiver: console
  routes:
    - matchers: ['severty="critcal"']
      receiver: pagr
receivers:
  - {type: console, name: console}
"""


def test_cli_prints_every_problem_text_and_github(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    out = runner.invoke(app, ["notifier", "check", str(bad), str(EXAMPLES / "notifier.yaml")])
    assert out.exit_code == 1
    assert out.stdout.splitlines() == [
        f"{bad}:4:19: route.routes[0].matchers[0]: no incident carries the label 'severty', so severty=\"critcal\" "
        "never matches (did you mean 'severity'?)",
        f"{bad}:4:28: route.routes[0].matchers[0]: 'critcal' is not a valid severity, so severty=\"critcal\" never "
        "matches (did you mean 'critical'?)",
        f"{bad}:5:17: route.routes[0].receiver: no receiver named 'pagr' (receivers: console)",
        f"{EXAMPLES / 'notifier.yaml'}: OK (1 receivers, 0 inhibit rules, 0 maintenance windows)",
    ]
    assert "3 problems, 0 warnings in 1 file" in out.stderr
    gh = runner.invoke(app, ["notifier", "check", "--format", "github", str(bad)])
    assert gh.exit_code == 1
    assert gh.stdout.splitlines()[2] == (
        f"::error file={bad},line=5,col=17,title=tailhound notifier check::route.routes[0].receiver: no receiver "
        "named 'pagr' (receivers: console)"
    )
    assert runner.invoke(app, ["notifier", "check", "--format", "xml", str(bad)]).exit_code != 0


def test_cli_rules_option_decides_the_known_labels(tmp_path):
    cfg = tmp_path / "n.yaml"
    cfg.write_text("route:\n  receiver: console\n  routes:\n    - matchers: ['owner=\"gpu-team\"']\n")
    assert runner.invoke(app, ["notifier", "check", str(cfg)]).exit_code == 1
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n      - name: hot\n        labels: {owner: gpu-team}\n"
    )
    ok = runner.invoke(app, ["notifier", "check", "--rules", str(rules), str(cfg)])
    assert ok.exit_code == 0, ok.output
    missing = runner.invoke(app, ["notifier", "check", "--rules", str(tmp_path / "nope"), str(cfg)])
    assert missing.exit_code == 2 and "no such rules directory" in missing.stdout


def test_cli_secrets_reports_each_receiver_at_its_line(tmp_path, monkeypatch):
    monkeypatch.delenv("TAILHOUND_CONFIG", raising=False)
    monkeypatch.delenv("TH_TEST_PD_KEY", raising=False)
    cfg = tmp_path / "n.yaml"
    cfg.write_text(
        "route: {receiver: pd}\nreceivers:\n  - {type: console, name: c}\n"
        "  - {type: pagerduty, name: pd, routing_key: {env: TH_TEST_PD_KEY}}\n"
    )
    assert runner.invoke(app, ["notifier", "check", str(cfg)]).exit_code == 0
    out = runner.invoke(app, ["notifier", "check", "--secrets", str(cfg)])
    assert out.exit_code == 1
    assert out.stdout.startswith(f"{cfg}:4:5: receiver 'pd': ") and "TH_TEST_PD_KEY" in out.stdout
    monkeypatch.setenv("TH_TEST_PD_KEY", "k" * 32)
    assert runner.invoke(app, ["notifier", "check", "--secrets", str(cfg)]).exit_code == 0


def test_exit_codes_of_the_command(tmp_path):
    """0 clean (warnings alone included), 1 problems, 2 a path that does not exist."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    warn = tmp_path / "warn.yaml"
    warn.write_text("route:\n  receiver: console\n  routes:\n    - receiver: console\n    - receiver: console\n")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tailhound", "notifier", "check", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    clean = run(str(EXAMPLES / "notifier.yaml"), str(EXAMPLES / "notifier-production.yaml"), str(warn))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"{warn}:5:7: warning: route.routes[1]: never reached" in clean.stdout
    problems = run(str(bad), str(EXAMPLES / "notifier.yaml"))
    assert problems.returncode == 1 and problems.stdout.count(f"{bad}:") == 3
    missing = run(str(bad), str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and f"{tmp_path / 'nope.yaml'}: no such file" in missing.stdout
    assert missing.stdout.count(f"{bad}:") == 3  # the other files are still checked
