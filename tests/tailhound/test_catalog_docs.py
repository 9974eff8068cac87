"""docs/signals.md is generated from the catalog and kept up to date (`tailhound catalog`)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from tailhound.catalog import default_catalog, parse_catalog
from tailhound.catalog.markdown import format_mapping, group_signals, is_stale, render_markdown, write_markdown
from tailhound.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "signals.md"
runner = CliRunner()


def _rows(text: str) -> dict[str, list[str]]:
    """Table rows by canonical signal: the cells after the first one."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| `([a-z_]+\.[a-z0-9_]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split(" | ")]
    return rows


def test_committed_doc_matches_the_catalog():
    assert not is_stale(DOC), "run `tailhound catalog` and commit docs/signals.md"


def test_every_signal_and_source_metric_appears_once():
    catalog = default_catalog()
    text = DOC.read_text(encoding="utf-8").split("## Derived signals")[0]
    rows = _rows(text)
    assert set(rows) == set(catalog.signals)
    assert len(re.findall(r"^\| `[a-z_]+\.[a-z0-9_]+` \|", text, re.M)) == len(catalog.signals)
    for name, spec in catalog.signals.items():
        row = " | ".join(rows[name])
        assert row.startswith(f"{spec.kind} | "), name
        for mappings in spec.sources.values():
            for sm in mappings:
                assert format_mapping(sm) in row, f"{name}: {sm.metric} missing"
    for src in catalog.sources():
        assert f"| `{src}` |" in text, f"source {src} is not described"


def test_scale_and_match_are_shown():
    text = render_markdown()
    assert "`DCGM_FI_DEV_GPU_UTIL` ×0.01" in text
    assert '`tailhound_gpu_ecc_errors_total{type="corrected"}`' in text
    assert '`tailhound_gpu_ecc_errors_total{type="uncorrected"}`' in text


def test_groups_follow_the_signal_prefixes():
    groups = {g.title: [s.name for s in specs] for g, specs in group_signals(default_catalog())}
    assert list(groups) == [
        "GPU",
        "MIG instances",
        "Inference engine",
        "Node network",
        "Network probes",
        "Streaming probe",
    ]
    assert all(n.startswith("gpu.") for n in groups["GPU"])
    assert groups["MIG instances"] == ["mig.dram_bw_util", "mig.memory_used", "mig.memory_total"]
    assert "latency.ttft" in groups["Inference engine"] and "tokens.prompt" in groups["Inference engine"]
    assert "net.listen_overflows" in groups["Node network"] and "net.hop_rtt" in groups["Network probes"]
    assert "probe.success" in groups["Network probes"] and "lb.health_timeout" in groups["Streaming probe"]


def test_intro_explains_sources_kinds_and_quirks():
    text = render_markdown()
    for phrase in ("recording jobs", "delta", "reset", "bucket deltas", "`instance`", "NOT_SUPPORTED", "untyped"):
        assert phrase in text, phrase


def test_a_new_signal_lands_in_other_with_its_own_source_column():
    catalog = parse_catalog(
        {
            "signals": {
                "queue.depth": {
                    "unit": "",
                    "kind": "gauge",
                    "description": "A | pipe.",
                    "sources": {"mybroker": {"metric": "depth", "scale": 2, "match": {"q": "a"}}},
                }
            }
        }
    )
    text = render_markdown(catalog)
    assert "### Other" in text
    assert '| `queue.depth` | gauge | — | node | A \\| pipe. | `depth{q="a"}` ×2 |' in text
    assert "| mybroker |" in text


def test_cli_writes_and_checks(tmp_path):
    out = tmp_path / "signals.md"
    assert runner.invoke(app, ["catalog", "--check", "--out", str(out)]).exit_code == 1
    result = runner.invoke(app, ["catalog", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == render_markdown()
    assert runner.invoke(app, ["catalog", "--check", "--out", str(out)]).exit_code == 0
    out.write_text("stale\n", encoding="utf-8")
    assert runner.invoke(app, ["catalog", "--check", "--out", str(out)]).exit_code == 1
    assert runner.invoke(app, ["catalog", "--check", "--out", str(DOC)]).exit_code == 0


def test_write_markdown_creates_the_directory(tmp_path):
    path = write_markdown(tmp_path / "docs" / "signals.md")
    assert not is_stale(path)


def test_mig_section_and_column():
    text = render_markdown()
    assert "## MIG GPU instances" in text and '`"0/mig3"`' in text
    rows = _rows(text.split("## Derived signals")[0])
    assert rows["gpu.temperature"][3] == "device" and rows["gpu.dram_bw_util"][3] == "instance"
    assert rows["gpu.util"][3] == ""
    assert '`DCGM_FI_PROF_DRAM_ACTIVE{GPU_I_ID=~".+"}`' in " | ".join(rows["mig.dram_bw_util"])
    assert "GPU_I_ID" not in " | ".join(rows["gpu.dram_bw_util"][4:])  # the whole-GPU side's `GPU_I_ID=""` is implied


def test_engine_coverage_section():
    text = render_markdown().split("## Engine coverage")[1]
    catalog = default_catalog()
    for name in catalog.engine_signals():
        assert f"| `{name}` |" in text
    assert "| `latency.ttft` | yes | **no** | yes |" in text  # vllm, tgi, nim
    assert "| `latency.tpot` | stand-in | stand-in | stand-in |" in text
    for engine in catalog.engines.values():
        assert f"### {engine.title} (`{engine.name}`)" in text
        for signal, note in engine.not_exposed.items():
            assert f"- `{signal}` (not exposed): " in text and note.split()[0] in text
