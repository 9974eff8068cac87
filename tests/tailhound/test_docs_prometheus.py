"""docs/prometheus.md and the README's part of it stay true to the code: the ingest.yaml examples load, the printed
remote_write block is what `tailhound ingest --prometheus-config` prints, the metrics and events named exist, the
commands parse with the real CLI, the links and anchors resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailhound.doctor.observed import hint_text
from tailhound.ingest.config import parse_ingest_config
from tailhound.ingest.metrics import IngestMetrics
from tailhound.ingest.prometheus_snippet import remote_write_snippet
from tailhound.ingest.service import ORIGIN_FEDERATION, ORIGIN_REMOTE_WRITE
from tests.deploy.helpers import check_cli_args, check_settings_env_name
from tests.notifier.test_docs import _shell_commands

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "prometheus.md"
README = ROOT / "README.md"
INGEST_SOURCES = ROOT / "ingest"


def text() -> str:
    return DOC.read_text(encoding="utf-8")


def blocks(markdown: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", markdown, flags=re.S | re.M)


def ingest_examples() -> list[str]:
    return [b for b in blocks(text(), "yaml") if b.startswith("# ingest.yaml")]


def uncomment_top_level(block: str) -> str:
    """The example with its commented top-level alternatives (`# ha: {...}`) made live."""
    return "\n".join(line[2:] if re.match(r"# [a-z_]+: ", line) else line for line in block.splitlines()) + "\n"


def test_the_ingest_yaml_examples_load():
    examples = ingest_examples()
    assert len(examples) == 2, "a remote-write and a federation example"
    remote, federation = (
        parse_ingest_config(b, origin=f"docs/prometheus.md example {i}") for i, b in enumerate(examples)
    )
    assert remote.listen and remote.federation is None and remote.auth.bearer_token_file is not None
    assert remote.remote_write.grouping.sources["dcgm-exporter"] == "dcgm"
    assert federation.federation is not None and federation.federation.grouping.close_on_newer
    assert federation.federation.matchers == {"cluster": "prod-a"}
    with_ha = parse_ingest_config(uncomment_top_level(examples[0]), origin="docs/prometheus.md (ha)")
    assert with_ha.ha is not None and with_ha.ha.failover_s == 30
    (ha_block,) = [b for b in blocks(text(), "yaml") if b.startswith("ha:")]
    assert parse_ingest_config(ha_block, origin="docs/prometheus.md (ha block)").ha == with_ha.ha


def test_the_printed_remote_write_block_is_what_tailhound_prints():
    doc = text()
    (command,) = [ln for b in blocks(doc, "sh") for ln in b.splitlines() if "--prometheus-config" in ln]
    url = re.search(r"--url (\S+)", command).group(1)
    expected = remote_write_snippet(url, parse_ingest_config(ingest_examples()[0])).splitlines()
    (shown,) = [b for b in blocks(doc, "yaml") if b.startswith("# prometheus.yml")]
    shown = shown.splitlines()
    assert len(shown) == len(expected)
    for got, want in zip(shown, expected, strict=True):
        if got.lstrip().startswith("regex: '"):  # abridged in the doc
            assert want.lstrip().startswith("regex: '") and len(want) > 1000
            continue
        assert got == want


def _families() -> dict[str, str]:
    m = IngestMetrics()
    m.watch(
        lambda: {"x": 1}, lambda: {k: 0.0 for k in ("pending_samples", "open_scrapes", "sources", "dead_letter_queue")}
    )
    return {f.name: f.type for f in m.registry.collect()}


def test_the_metrics_table_is_the_ingest_registry():
    """Every family the ingest serves is in the table and nothing else (gauges: those IngestService exports)."""
    from tailhound.ingest import service

    source = Path(service.__file__).read_text(encoding="utf-8")
    gauges = re.search(r"def gauges\(self\).*?return \{(.*?)\}", source, flags=re.S).group(1)
    gauge_names = set(re.findall(r'"(\w+)":', gauges))
    families = _families()
    assert {f"tailhound_ingest_{g}" for g in gauge_names} <= set(families)
    documented = {
        name + ("_total" if kind == "counter" else "")
        for name, kind in families.items()
        if name.startswith("tailhound_ingest_")
    }  # process_* and python_*: docs/operations.md
    table = set(re.findall(r"^\| `(tailhound_ingest_\w+)(?:\{[^`]*\})?` \|", text(), flags=re.M))
    assert table == documented, f"undocumented: {documented - table}; not metrics: {table - documented}"


def test_the_events_named_are_counted_somewhere():
    code = "\n".join(p.read_text(encoding="utf-8") for p in INGEST_SOURCES.glob("*.py"))
    section = text().split("`tailhound_ingest_events_total{event}`:", 1)[1].split("Watch for:", 1)[0]
    names = {n for cell in re.findall(r"^\| (.*?) \|", section, flags=re.M) for n in re.findall(r"`(\w+)`", cell)}
    assert {"late_samples", "ha_failovers", "pulls_failed", "rejected_no_node"} <= names
    for name in names:
        if name.startswith("status_"):
            assert name[7:].isdigit() and 'f"status_{status}"' in code, name
        elif name.startswith(("rejected_", "skipped_")):
            prefix, kind = name.split("_", 1)
            assert f'"{kind}"' in code and (f'"{prefix}_"' in code or f'f"{prefix}_{{kind}}"' in code), name
        else:
            assert f'"{name}"' in code, f"event {name!r} is counted nowhere in tailhound/ingest"


def test_dead_letter_origins_and_the_doctor_hint_are_the_codes():
    doc = text()
    assert f"**`{ORIGIN_REMOTE_WRITE}`**" in doc and f"**`{ORIGIN_FEDERATION}`**" in doc
    assert "hint: " + hint_text("dcgm-exporter", "dcgm") in doc


def _commands(markdown: str) -> list[list[str]]:
    out = []
    for block in blocks(markdown, "sh"):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            for words in _shell_commands(line.split()):
                while words and re.match(r"[A-Z_]+=", words[0]):  # VAR=value tailhound ...
                    words.pop(0)
                if words[:1] == ["tailhound"]:
                    out.append(words[1:])
    return out


@pytest.mark.parametrize("args", _commands(DOC.read_text(encoding="utf-8")), ids=" ".join)
def test_the_commands_parse(args):
    check_cli_args(args)


def _anchors(markdown: str) -> set[str]:
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_links_and_anchors_resolve():
    doc = text()
    anchors = _anchors(doc.split("```")[0] + "\n".join(doc.split("```")[2::2]))
    for target in re.findall(r"\]\(#([^)]+)\)", doc):
        assert target in anchors, f"no heading for #{target}"
    for link in re.findall(r"\]\(([^)#\s:]+)(?:#[^)]*)?\)", doc):
        assert (DOC.parent / link).exists(), f"docs/prometheus.md links a missing {link}"
    for path in re.findall(r"`((?:deploy|tailhound|agents|tests)/[\w./-]+\.(?:py|yaml|yml|md))`", doc):
        assert (ROOT / path).exists(), f"docs/prometheus.md names a missing {path}"


def test_the_readme_points_here():
    readme = README.read_text(encoding="utf-8")
    assert "(docs/prometheus.md)" in readme
    assert "## Two ways in: the agent, or the Prometheus you already run" in readme
    commands = readme.split("## Commands", 1)[1].split("\n## ", 1)[0]
    assert "`tailhound ingest -c ingest.yaml" in commands and "`tailhound doctor --prometheus URL" in commands
    config = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert "`TAILHOUND_INGEST__CONFIG`" in config
    check_settings_env_name("TAILHOUND_INGEST__CONFIG")
    where = readme.split("Where to look:", 1)[1].split("Design rules:", 1)[0]
    assert "ingest/" in where and "docs/prometheus.md" in where
    two_ways = readme.split("## Two ways in", 1)[1].split("\n## ", 1)[0]
    assert "(docs/prometheus.md)" in two_ways and "(docs/agent.md)" in two_ways
    for args in _commands(two_ways):
        check_cli_args(args)
    assert len(_commands(two_ways)) == 4  # doctor, the printed remote_write block, the example, ingest -c
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (first,) = blocks(quick, "sh")[:1]
    assert [ln.split()[:2] for ln in first.splitlines()] == [["make", "demo"], ["make", "test"]]
