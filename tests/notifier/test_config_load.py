"""The notifier loads its config with the one validator that `notifier check` uses: every error at once,
each at its line and column, the same problems the check reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tailhound.errors import ConfigFileError
from tailhound.notifier.config import RECEIVER_ERROR, NotifierConfig, load_config, parse_config
from tailhound.notifier.config_check import check_file, is_error
from tailhound.notifier.receiver_set import notifier_config
from tailhound.settings import Settings

BROKEN = """\
grouping: {wiat: 30s}
route:
  receiver: console
  routes:
    - matchers: ['severity="critical"']
      receiver: pagr
receivers:
  - {type: console, name: console}
  - {type: console, name: pager}
  - {type: console, name: pager}
"""


def _problems(exc: ConfigFileError) -> list[tuple[int | None, int | None, str]]:
    return [(p.line, p.column, p.message) for p in exc.problems]


def test_loading_reports_every_error_at_its_line_and_column():
    with pytest.raises(ConfigFileError) as caught:
        parse_config(BROKEN, "n.yaml")
    assert _problems(caught.value) == [
        (1, 12, "grouping: unknown key 'wiat'"),
        (6, 17, "route.routes[0].receiver: no receiver named 'pagr'"),
        (10, 27, "receivers[2].name: receiver 'pager' is defined twice"),
    ]
    assert str(caught.value).startswith("n.yaml:1:12: grouping: unknown key 'wiat' (did you mean 'wait'?)")


def test_the_server_and_the_check_report_the_same_problems(tmp_path: Path):
    bad = tmp_path / "notifier.yaml"
    bad.write_text(BROKEN)
    with pytest.raises(ConfigFileError) as loaded:
        load_config(bad)
    with pytest.raises(ConfigFileError) as served:
        notifier_config(Settings(notifier={"config": str(bad)}))
    checked = [p for p in check_file(bad, None).problems if is_error(p)]
    assert list(loaded.value.problems) == list(served.value.problems) == checked
    assert all(p.path == str(bad) for p in checked)


def test_warnings_do_not_stop_the_notifier(caplog):
    cfg = parse_config("route:\n  receiver: console\n  routes:\n    - receiver: console\n    - receiver: console\n")
    assert len(cfg.route.routes) == 2
    assert "route.routes[1]: never reached" in caplog.text


def test_labels_are_only_checked_when_asked():
    """The loader does not know the rule pack: a label of it is not an error at load (`notifier check` says)."""
    cfg = parse_config(
        "route:\n  receiver: console\n  routes:\n    - {matchers: ['owner=\"gpu\"'], receiver: console}\n"
    )
    assert cfg.route.routes[0].matchers[0].name == "owner"


def test_the_model_applies_the_same_receiver_rules():
    with pytest.raises(ValidationError) as caught:
        NotifierConfig.model_validate({"route": {"receiver": "nobody"}})
    [err] = caught.value.errors()
    assert err["type"] == RECEIVER_ERROR
    assert err["msg"] == "route.receiver: no receiver named 'nobody'"
