"""Incidents record where their rule is defined and the rule pack's version (streams/ruleset/pack.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tailhound.streams.ruleset.pack import pack_version
from tailhound.streams.ruleset.rulefile import load_rules

ROOT = Path(__file__).resolve().parents[2]
RULE = (
    "groups:\n  - name: g\n    rules:\n      - name: hot\n        scope: gpu\n"
    "        when: {signal: gpu.temperature, above: 80}\n        root_cause: gpu-thermal-throttle\n"
)


def test_a_plain_directory_is_versioned_by_content(tmp_path):
    (tmp_path / "a.yaml").write_text(RULE)
    rules = load_rules(tmp_path)
    hot = rules.by_name("hot")
    assert hot.origin == f"{tmp_path.name}/a.yaml:4"
    assert hot.pack_version.startswith("sha256:") and len(hot.pack_version) == len("sha256:") + 12
    other = tmp_path / "copy"
    other.mkdir()
    (other / "a.yaml").write_text(RULE)
    assert load_rules(other).by_name("hot").pack_version == hot.pack_version  # same files, same version
    (other / "a.yaml").write_text(RULE.replace("80", "85"))
    assert load_rules(other).by_name("hot").pack_version != hot.pack_version


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_checkout_is_versioned_by_its_commit_and_marked_dirty_with_local_changes(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "rules").mkdir()
    rule_file = tmp_path / "rules" / "a.yaml"
    rule_file.write_text(RULE)
    git("add", ".")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "rules")
    commit = git("rev-parse", "--short=12", "HEAD")
    assert pack_version([rule_file]) == f"git:{commit}"
    rule_file.write_text(RULE.replace("80", "85"))
    assert pack_version([rule_file]).startswith(f"git:{commit}+dirty.")


def test_incidents_carry_the_rule_origin_and_pack_version():
    from tests.scenarios.suite import SCENARIOS, replay

    events, _ = replay(SCENARIOS["dcgm-default-thermal"])
    opened = next(e for e in events if e.event == "opened")
    assert opened.rule_origin == f"rules/gpu.yaml:{_line_of_rule(opened.rule)}"
    assert opened.rules_version == load_rules(ROOT / "rules").by_name(opened.rule).pack_version


def _line_of_rule(name: str) -> int:
    for i, line in enumerate((ROOT / "rules" / "gpu.yaml").read_text().splitlines(), 1):
        if line.strip() == f"- name: {name}":
            return i
    raise AssertionError(name)
