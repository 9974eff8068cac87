"""``tailhound check``: every config file kind, detected from its keys, validated by its process's loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.cli.check_files import check_file, detect_kind

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

GOOD = {
    "agent": "node: n1\nscrape:\n  - {job: vllm, url: 'http://127.0.0.1:8000/metrics', interval_s: 5s}\n",
    "notifier": "route:\n  receiver: console\n  group_wait: 30s\nreceivers: [{type: console, name: console}]\n",
    "ingest": "listen: 127.0.0.1:0\nremote_write: {grouping: {settle_s: 5s}}\nauth: {bearer_token_env: null}\n",
    "settings": "broker: kafka://127.0.0.1:9092\nstreams: {commit_interval_s: 1s}\n",
    "rules": (ROOT / "rules" / "network.yaml").read_text(encoding="utf-8"),
    "capacity": "generated_at: 1\nsource: t\nmodels: {'*': {safe_request_rate: 2, queue_scale_out: 1, "
    "max_num_seqs: 8}}\n",
}
BAD = {
    "agent": (
        "node: n1\npublish: {lingr_ms: 5}\n",
        ":2:11: publish: unknown key 'lingr_ms' (did you mean 'linger_ms'?)",
    ),
    "notifier": (
        "route: {receiver: console, group_wiat: 30s}\nreceivers: [{type: console, name: console}]\n",
        ":1:28: route: unknown key 'group_wiat' (did you mean 'group_wait'?)",
    ),
    "ingest": ("listen: 127.0.0.1:0\npoll_s: soon\n", ":2:9: poll_s: invalid duration 'soon'"),
    "settings": (
        "broker: kafka://127.0.0.1:9092\nstreams:\n  app_idd: x\n",
        ":3:3: streams: unknown key 'app_idd' (did you mean 'app_id'?)",
    ),
    "rules": (
        "groups:\n  - name: g\n    rules:\n      - name: x\n        scope: gpu\n",
        ":4:9: rule x: missing key 'when'",
    ),
    "capacity": (
        "generated_at: 1\nsource: t\nmodels: {'*': {safe_request_rate: 2, queue_scale_out: 1, max_num_seq: 8}}\n",
        "did you mean 'max_num_seqs'?",
    ),
}


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_each_kind_is_detected_and_passes(tmp_path, kind, monkeypatch):
    monkeypatch.delenv("TAILHOUND_BROKER", raising=False)
    f = tmp_path / "some.yaml"
    f.write_text(GOOD[kind])
    assert detect_kind(f) == (kind, "")
    result = runner.invoke(app, ["check", str(f)])
    assert result.exit_code == 0, result.output
    assert f"{f}: OK ({kind})" in result.output


@pytest.mark.parametrize("kind", sorted(BAD))
def test_each_kind_reports_its_problems_at_file_line_and_exits_1(tmp_path, kind):
    text, expected = BAD[kind]
    f = tmp_path / "some.yaml"
    f.write_text(text)
    result = runner.invoke(app, ["check", "--kind", kind, str(f)])
    assert result.exit_code == 1, result.output
    assert expected in result.output and f"{f}:" in result.output
    assert "OK" not in result.output


def test_one_bad_file_among_good_ones_fails_the_run_and_each_file_is_reported(tmp_path):
    good, bad = tmp_path / "notifier.yaml", tmp_path / "settings.yaml"
    good.write_text(GOOD["notifier"])
    bad.write_text(BAD["settings"][0])
    result = runner.invoke(app, ["check", str(good), str(bad)])
    assert result.exit_code == 1
    assert f"{good}: OK (notifier)" in result.output and f"{bad}:3:3: streams: unknown key" in result.output


def test_a_file_of_no_known_kind_asks_for_kind(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("something: else\n")
    checked = check_file(f)
    assert (
        checked.kind is None
        and "give --kind agent|notifier|ingest|settings|rules|capacity" in checked.problems[0].message
    )
    assert runner.invoke(app, ["check", "--kind", "nope", str(f)]).exit_code != 0


def test_the_bundled_examples_and_rule_pack_pass(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    monkeypatch.setenv("NODE_IP", "127.0.0.1")
    files = [*sorted((ROOT / "tailhound" / "examples").glob("*.yaml")), *sorted((ROOT / "rules").glob("*.yaml"))]
    result = runner.invoke(app, ["check", *map(str, files)])
    assert result.exit_code == 0, result.output
    assert result.output.count(": OK (") == len(files)
