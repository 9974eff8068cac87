"""``tailhound ingest``: the remote_write block it prints passes ``promtool check config`` and keeps exactly the
catalog's metrics; ``--check`` says what would run; bad files are errors naming the file, the line or the token
file (exit code 2 through ``tailhound.cli.main``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tailhound import cli
from tailhound.catalog import default_catalog
from tailhound.cli import app
from tailhound.errors import ConfigError, TailhoundError
from tailhound.ingest.prometheus_snippet import kept_jobs, kept_names
from tests.conftest import require_tool

runner = CliRunner()
URL = "http://tailhound-ingest.monitoring:9097/api/v1/write"
MINIMAL = """global:
  scrape_interval: 15s
  external_labels:
    cluster: lab
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: ['10.0.0.7:9400']
"""


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch):
    monkeypatch.delenv("TAILHOUND_INGEST_TOKEN", raising=False)


def run_main(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """`tailhound ARGV` through the console script's entry point: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["tailhound", *argv])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out = capsys.readouterr()
    code = exit_.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), out.out, " ".join(out.err.split())


def snippet(*args: str) -> str:
    result = runner.invoke(app, ["ingest", "--prometheus-config", "--url", URL, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def promtool_check(tmp_path: Path, block: str) -> subprocess.CompletedProcess:
    promtool = require_tool("promtool", "apt-get install prometheus")
    path = tmp_path / "prometheus.yml"
    path.write_text(MINIMAL + block)
    return subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)


def test_the_printed_remote_write_block_passes_promtool(tmp_path):
    block = snippet()
    check = promtool_check(tmp_path, block)
    assert check.returncode == 0, check.stdout + check.stderr
    (rw,) = yaml.safe_load(MINIMAL + block)["remote_write"]
    assert rw["url"] == URL and "authorization" not in rw
    assert rw["metadata_config"]["send"] is True


def keep_rule(block: str) -> tuple[re.Pattern, str]:
    """The one keep rule of a printed block: its regex (anchored as Prometheus anchors it) and separator."""
    (rw,) = yaml.safe_load(block)["remote_write"]
    (relabel,) = rw["write_relabel_configs"]
    assert (relabel["source_labels"], relabel["action"]) == (["__name__", "job"], "keep")
    return re.compile(relabel["regex"]), relabel["separator"]


def test_the_keep_regex_keeps_every_catalog_metric_and_nothing_else():
    keep, sep = keep_rule(snippet())  # Prometheus anchors a relabel regex: ^(?:regex)$
    names = kept_names()
    assert "up" in names and "DCGM_FI_DEV_GPU_TEMP" in names and "vllm:time_to_first_token_seconds_bucket" in names
    missed = [n for n in names if n != "up" and not keep.fullmatch(f"{n}{sep}kubernetes-pods")]
    assert missed == []
    for other in (
        "node_cpu_seconds_total",
        "go_goroutines",
        "scrape_duration_seconds",
        "DCGM_FI_DEV_GPU_TEMPX",
        "xup",
        "up_total",
        "vllm:num_requests_running_created",
        "DCGM_FI_DEV",
    ):
        assert not keep.fullmatch(f"{other}{sep}dcgm"), other
    assert keep.search(f"node_cpu_seconds_total_up{sep}dcgm")  # unanchored it would keep this: the anchors matter


def test_up_is_kept_only_for_the_jobs_that_are_catalog_sources():
    """`up` of every other job would be an empty snapshot on every scrape: only the catalog's sources keep it."""
    keep, sep = keep_rule(snippet())
    assert kept_jobs() == sorted(default_catalog().sources())
    for job in kept_jobs():
        assert keep.fullmatch(f"up{sep}{job}"), job
    for job in ("prometheus", "kubernetes-pods", "node-exporter", "dcgmx", "xdcgm", "", "dcgm;x"):
        assert not keep.fullmatch(f"up{sep}{job}"), job


def test_up_is_kept_for_the_jobs_ingest_yaml_maps_to_a_source(tmp_path):
    config = tmp_path / "ingest.yaml"
    config.write_text(
        "remote_write:\n  grouping:\n    sources: {dcgm-exporter: dcgm, node.exporter+1: node, my-app: my-app}\n"
    )
    keep, sep = keep_rule(snippet("-c", str(config)))
    assert keep.fullmatch(f"up{sep}dcgm-exporter") and keep.fullmatch(f"up{sep}node.exporter+1")
    assert not keep.fullmatch(f"up{sep}nodexexporter+1")  # the job is a literal, not a regex
    assert not keep.fullmatch(f"up{sep}my-app")  # mapped to no catalog source
    check = promtool_check(tmp_path, snippet("-c", str(config)))
    assert check.returncode == 0, check.stdout + check.stderr


def test_with_a_token_configured_the_block_sends_a_credentials_file(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    config = tmp_path / "ingest.yaml"
    config.write_text(f"listen: 0.0.0.0:9097\nauth:\n  bearer_token_file: {tmp_path / 'token'}\n")
    block = snippet("-c", str(config))
    assert "s3cret" not in block
    (rw,) = yaml.safe_load(block)["remote_write"]
    assert rw["authorization"]["type"] == "Bearer" and rw["authorization"]["credentials_file"]
    check = promtool_check(tmp_path, block)
    assert check.returncode == 0, check.stdout + check.stderr


def test_check_says_what_would_run_and_exits_0(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    config = tmp_path / "ingest.yaml"
    config.write_text(f"""listen: 127.0.0.1:19097
remote_write:
  grouping:
    node_labels: [node, instance]
    sources: {{dcgm-exporter: dcgm}}
    settle_s: 3
ha:
  failover_s: 20
auth:
  bearer_token_file: {tmp_path / "token"}
federation:
  url: http://prometheus:9090
  interval_s: 30
""")
    result = runner.invoke(app, ["ingest", "-c", str(config), "--check"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert out.startswith("ok: remote write: POST http://127.0.0.1:19097/api/v1/write (1 credential(s))")
    assert "node from node, instance; source from job (mapped: dcgm-exporter->dcgm)" in out
    assert "complete 3 s after its last sample" in out
    assert "HA pairs: one replica per cluster (label replica), fail-over after 20 s" in out
    assert "federation: GET http://prometheus:9090/federate every 30 s" in out
    plain = tmp_path / "plain.yaml"
    plain.write_text("listen: 127.0.0.1:19098\n")
    result = runner.invoke(app, ["ingest", "-c", str(plain), "--check"])
    assert result.exit_code == 0 and "(no authentication)" in result.stdout and "federation" not in result.stdout


def test_a_missing_token_file_is_an_error_naming_it(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "nope" / "token"
    config = tmp_path / "ingest.yaml"
    config.write_text(f"auth:\n  bearer_token_file: {missing}\n")
    result = runner.invoke(app, ["ingest", "-c", str(config), "--check"])
    assert isinstance(result.exception, ConfigError) and str(missing) in str(result.exception)
    code, out, err = run_main(["ingest", "-c", str(config), "--check"], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert f"error: auth.bearer_token_file: cannot read {missing}: No such file or directory" in err
    # not checking does not skip it: the service would refuse every request
    code, _out, err = run_main(["ingest", "-c", str(config), "--duration", "0.1"], monkeypatch, capsys)
    assert code == 2 and str(missing) in err


def test_tokens_in_the_yaml_are_refused_naming_the_line(tmp_path, monkeypatch, capsys):
    config = tmp_path / "ingest.yaml"
    config.write_text("listen: 127.0.0.1:9097\n# a comment\nremote_write:\n  bearer_tokens: [s3cret]\n")
    code, out, err = run_main(["ingest", "-c", str(config), "--check"], monkeypatch, capsys)
    assert code == 2 and out == ""
    # the line of the remote_write block (the check is the block's), the key named in the message
    assert f"error: {config}:3:1: remote_write:" in err and "remote_write.bearer_tokens" in err and "under auth:" in err
    assert "s3cret" not in err
    config.write_text("listen: 127.0.0.1:9097\nremote_write:\n  basic_auth: {prom: pw}\n")
    code, _out, err = run_main(["ingest", "-c", str(config), "--check"], monkeypatch, capsys)
    assert code == 2 and f"{config}:2:" in err and "remote_write.basic_auth" in err


def test_ingest_without_a_config_is_an_error(monkeypatch, capsys):
    result = runner.invoke(app, ["ingest"])
    assert isinstance(result.exception, TailhoundError) and "--config" in str(result.exception)
    code, out, err = run_main(["ingest", "--check"], monkeypatch, capsys)
    assert code == 2 and "tailhound ingest needs --config ingest.yaml" in err


class _Service:
    """Stands in for IngestService: serves nothing until stopped."""

    def __init__(self, settings, cfg) -> None:  # the real service's arguments
        pass

    async def run(self, stop) -> None:  # an asyncio.Event
        await stop.wait()


@pytest.fixture
def restored_gc():
    """The ingest's run tunes this process's collector: put it back for the other tests."""
    import gc

    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


async def test_the_standalone_ingest_tunes_its_collector_at_start(monkeypatch, restored_gc):
    """What exists at start is frozen and young collections run at the worker's threshold, not 700."""
    import asyncio
    import gc

    from tailhound.cli import ingest as ingest_cli
    from tailhound.ingest import service as service_module
    from tailhound.streams.gc_freeze import GC_GEN0_THRESHOLD

    gen1, gen2 = gc.get_threshold()[1:]
    gc.unfreeze()
    monkeypatch.setattr(service_module, "IngestService", _Service)
    await asyncio.wait_for(ingest_cli.run(None, None, 0.05), 10)
    assert gc.get_threshold() == (GC_GEN0_THRESHOLD, gen1, gen2)
    assert gc.get_freeze_count() > 0


def test_the_ingest_cli_reads_the_threshold_without_the_faust_app():
    """The constant lives in a light module; streams.app re-exports it for its importers."""
    code = (
        "import sys; from tailhound.cli import ingest; ingest.tune_gc(); "
        "assert 'tailhound.streams.app' not in sys.modules and 'faust' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    from tailhound.streams import app as streams_app
    from tailhound.streams import gc_freeze

    assert streams_app.GC_GEN0_THRESHOLD == gc_freeze.GC_GEN0_THRESHOLD


async def test_the_standalone_ingest_freezes_what_is_alive_after_its_warm_up(monkeypatch, restored_gc):
    """Its caches live as long as the process: frozen once, the collector no longer walks them."""
    import asyncio

    from tailhound.cli import ingest as ingest_cli
    from tailhound.ingest import service as service_module

    frozen = []
    monkeypatch.setattr(service_module, "IngestService", _Service)
    monkeypatch.setattr(ingest_cli, "FREEZE_AFTER_S", 0.01)
    monkeypatch.setattr(ingest_cli, "freeze_long_lived", lambda: frozen.append(1))
    await asyncio.wait_for(ingest_cli.run(None, None, 0.3), 10)
    assert frozen == [1]


def test_freezing_moves_the_live_objects_out_of_the_collectors_way():
    import gc

    from tailhound.cli.ingest import freeze_long_lived

    before = gc.get_freeze_count()
    try:
        freeze_long_lived()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
