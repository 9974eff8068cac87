"""Bounded YAML (tailhound/yamlfile.py): aliases that expand to half a million nodes, nesting past Python's
recursion limit and 30 MB files are refused at their line by every loader the project has, quickly and with
a ConfigFileError (never a RecursionError or a second of parsing); `rules check` refuses what the worker
refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailhound.agents.config import load_agent_config
from tailhound.capacity_file import load_capacity_file
from tailhound.errors import ConfigFileError
from tailhound.ingest.config import load_ingest_config
from tailhound.notifier.config import load_config, parse_config
from tailhound.notifier.config_check import check_file, label_space
from tailhound.rulestest.unit_file import load_test_file
from tailhound.settings import load_settings
from tailhound.streams.ruleset.check import check_paths
from tailhound.streams.ruleset.rulefile import load_rules, parse_rule_text
from tailhound.yamlfile import LIMITS, YamlLimitError, YamlLimits, compose_with_duplicates, safe_load
from tests.hostile.yaml_attacks import alias_notifier_file, alias_rule_file, huge, nested_block, nested_flow

LOADERS = {  # every loader of a file people write, by the top-level key it needs
    "rules": (load_rules, "groups"),
    "agent": (load_agent_config, "node"),
    "notifier": (load_config, "route"),
    "ingest": (load_ingest_config, "listen"),
    "capacity": (load_capacity_file, "target"),
    "settings": (lambda p: load_settings(p), "streams"),
    "rule tests": (load_test_file, "tests"),
}


def test_a_few_hundred_bytes_of_aliases_are_refused_not_expanded():
    text = alias_rule_file()
    assert len(text) < 1024
    with pytest.raises(YamlLimitError, match="too many nodes"):
        safe_load(text)
    small = alias_rule_file(levels=1)  # the same shape, 81 conditions: a valid rule
    assert parse_rule_text(small, "small.yaml")[0].name == "hot"


def test_the_alias_rule_file_is_refused_by_rules_check_and_by_the_worker_alike(tmp_path):
    (tmp_path / "laughs.yaml").write_text(alias_rule_file())
    problems, _ = check_paths([tmp_path])
    assert len(problems) == 1 and "refused: too many nodes" in problems[0].text()
    assert problems[0].line == 8  # the rule's `when:`, where the expansion passes the limit
    with pytest.raises(ConfigFileError, match="refused: too many nodes"):
        load_rules(tmp_path)


def test_the_alias_notifier_file_is_refused_by_the_loader_and_notifier_check(tmp_path):
    path = tmp_path / "notifier.yaml"
    path.write_text(alias_notifier_file())
    with pytest.raises(ConfigFileError, match="refused: too many nodes"):
        load_config(path)
    checked = check_file(path, label_space(None)[0])
    assert any("refused: too many nodes" in p.text() for p in checked.problems)
    assert len(parse_config(alias_notifier_file(levels=1)).route.routes) == 9  # the shape itself is valid


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("style", ["flow", "block"])
def test_deep_nesting_is_a_config_error_in_every_loader(tmp_path, kind, style):
    load, key = LOADERS[kind]
    path = tmp_path / ("t.yaml" if kind != "rules" else "rules.yaml")
    path.write_text(f"{key}: {nested_flow(1000)}\n" if style == "flow" else nested_block(key, 500))
    target = tmp_path if kind == "rules" else path
    with pytest.raises(ConfigFileError, match="nested too deep") as err:
        load(target)
    assert err.value.line is not None


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_30_mb_file_is_refused_before_it_is_parsed(tmp_path, kind):
    load, _ = LOADERS[kind]
    path = huge(tmp_path / "big.yaml")
    with pytest.raises(ConfigFileError, match="file too large"):
        load(tmp_path if kind == "rules" else path)


def test_rules_check_reports_a_huge_or_deep_file_as_a_problem(tmp_path):
    huge(tmp_path / "big.yaml", megabytes=3)
    (tmp_path / "deep.yaml").write_text(f"groups: {nested_flow(5000)}\n")
    problems, _ = check_paths([tmp_path])
    texts = sorted(p.text() for p in problems)
    assert len(texts) == 2 and "file too large" in texts[0] and "nested too deep" in texts[1]


def test_limits_are_reported_at_their_line_and_configurable():
    with pytest.raises(YamlLimitError) as err:
        compose_with_duplicates("a: 1\nb:\n  - " + nested_flow(100) + "\n")
    assert err.value.problem_mark.line == 2
    tight = YamlLimits(max_aliases=2)
    assert safe_load("a: &x 1\nb: [*x, *x]\n", tight) == {"a": 1, "b": [1, 1]}
    with pytest.raises(YamlLimitError, match="too many aliases"):
        safe_load("a: &x 1\nb: [*x, *x, *x]\n", tight)
    assert isinstance(YamlLimitError("x"), yaml.YAMLError)  # every caller that handles bad YAML handles these


def test_every_file_the_project_ships_is_well_within_the_limits():
    root = Path(__file__).resolve().parents[2]
    files = [*root.glob("rules/**/*.yaml"), *root.glob("tailhound/**/*.yaml"), *root.glob("deploy/**/*.yaml")]
    assert len(files) > 10
    half = YamlLimits(
        max_bytes=LIMITS.max_bytes // 2,
        max_depth=LIMITS.max_depth // 2,
        max_aliases=LIMITS.max_aliases // 2,
        max_nodes=LIMITS.max_nodes // 2,
    )
    for f in files:
        for doc in yaml.compose_all(f.read_text(encoding="utf-8"), Loader=yaml.SafeLoader):
            if doc is not None:
                compose_with_duplicates(yaml.serialize(doc), half)
