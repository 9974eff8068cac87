from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tailhound.agents.exposition import Limits, parse_exposition, to_samples
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.recording import ScrapeRecord

FIXTURES = Path(__file__).parent / "fixtures"  # origins of the copied ones: fixtures/README.md
DCGM_NOT_SUPPORTED = 9.0e18  # dcgm-exporter prints NOT_SUPPORTED sentinels around 9.22e18


def by_name(samples):
    out = {}
    for s in samples:
        out.setdefault(s.name, []).append(s)
    return out


def fixture(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode()


def raw(families):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_vllm_v1_exposition():
    samples = by_name(to_samples(parse_exposition((FIXTURES / "vllm_v1.prom").read_text())))
    assert samples["vllm:num_requests_waiting"][0].value == 3.0
    assert samples["vllm:prompt_tokens_total"][0].kind == "counter"
    assert samples["vllm:prompt_tokens_total"][0].value == 1234567.0
    assert {s.labels["finished_reason"] for s in samples["vllm:request_success_total"]} == {"stop", "length"}
    assert not any(name.endswith("_created") for name in samples)
    [ttft] = samples["vllm:time_to_first_token_seconds"]
    assert ttft.kind == "histogram"
    assert ttft.le == [0.001, 0.1, 0.25, 0.5, 2.5]
    assert ttft.counts == [0, 120, 600, 900, 995] and ttft.count == 1000 and ttft.sum == 312.5
    assert ttft.labels == {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}


def test_dcgm_exporter_drops_not_supported_sentinels():
    samples = by_name(
        to_samples(
            parse_exposition((FIXTURES / "dcgm_exporter.prom").read_text()), drop=lambda v: v >= DCGM_NOT_SUPPORTED
        )
    )
    assert [s.labels["gpu"] for s in samples["DCGM_FI_DEV_GPU_TEMP"]] == ["0", "3"]
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in samples  # absent, never 0
    assert samples["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0].kind == "counter"


def test_agrees_with_prometheus_client_output():
    reg = CollectorRegistry()
    g = Gauge("tailhound_test_gauge", "g", ["gpu"], registry=reg)
    g.labels(gpu="1").set(7.5)
    c = Counter("tailhound_test_requests", "c", ["code"], registry=reg)
    c.labels(code='a"b\\c\nd\x1c\u2028}#').inc(3)
    h = Histogram("tailhound_test_latency_seconds", "h", buckets=(0.1, 1.0), registry=reg)
    for v in (0.05, 0.5, 5):
        h.observe(v)
    result = parse_exposition(generate_latest(reg).decode())
    assert result.rejected == {}
    samples = by_name(to_samples(result))
    assert samples["tailhound_test_gauge"][0].value == 7.5
    [counter] = samples["tailhound_test_requests_total"]
    assert counter.value == 3 and counter.labels == {"code": 'a"b\\c\nd\x1c\u2028}#'}
    [hist] = samples["tailhound_test_latency_seconds"]
    assert hist.le == [0.1, 1.0] and hist.counts == [1, 2] and hist.count == 3 and hist.sum == pytest.approx(5.55)


# --- real output from other projects (fixtures/README.md) ---------------------------------------------------------
def test_node_exporter_dmi_label_with_a_line_separator_character():
    """node_exporter's DMI string from issue #2228: `\\x1c` in a label value is not a line break."""
    result = parse_exposition(fixture("node_exporter_dmi.prom"))
    assert result.rejected == {} and result.problems == []
    assert [f.name for f in result] == [
        "node_disk_written_bytes_total",
        "node_dmi_info",
        "node_dmmultipath_device_active",
        "node_dmmultipath_device_info",
        "node_dmmultipath_device_paths",
    ]
    [dmi] = by_name(to_samples(result))["node_dmi_info"]
    assert dmi.value == 1 and dmi.labels["product_version"] == "\ufffd\x1c[\ufffd"
    assert dmi.labels["system_vendor"] == "Dell Inc." and len(dmi.labels) == 19
    assert len(by_name(to_samples(result))["node_disk_written_bytes_total"]) == 15


def test_openmetrics_go_client_output_with_exemplars():
    result = parse_exposition(fixture("openmetrics_alltypes.om.txt"))
    assert result.rejected == {}
    assert [(f.name, f.type) for f in result] == [
        ("go_build_info", "gauge"),
        ("promhttp_metric_handler_errors", "counter"),
        ("rpc_durations_histogram_seconds", "histogram"),
        ("rpc_durations_seconds", "summary"),
        ("rpc_requests", "counter"),
    ]
    samples = by_name(to_samples(result))
    assert not any(name.endswith("_created") for name in samples)
    [hist] = samples["rpc_durations_histogram_seconds"]
    assert hist.count == 15 and hist.le[0] == -0.00099 and len(hist.le) == 20
    assert hist.counts[7:9] == [3, 5]  # the buckets with exemplars keep their value, not the exemplar's
    assert {s.labels["service"]: s.value for s in samples["rpc_requests_total"]} == {
        "exponential": 22,
        "normal": 15,
        "uniform": 11,
    }
    assert all(s.kind == "counter" for s in samples["rpc_requests_total"])


def test_openmetrics_parser_test_input():
    result = parse_exposition(fixture("openmetrics_testparse.om.txt"))
    assert result.rejected == {}
    values = raw(result)
    assert values[("foo_total", ())] == 17.0  # `17.0 1520879607.789 # {id="counter-test"} 5`
    assert values[("hhh_count", ())] == 1 and values[("ggh_count", ())] == 1
    assert values[("testmetric", (("label", '"bar"'),))] == 1
    assert math.isnan(values[("nansum", (("quantile", "0.99"),))])
    samples = by_name(to_samples(result))
    assert samples["fizz_created"][0].value == 17  # a gauge of that name, not a `_created` series
    assert "foo_created" not in samples and "bar_created" not in samples
    assert [s.value for s in samples["go_goroutines"]] == [33]
    assert "nansum" not in samples or all(math.isfinite(s.value) for s in samples["nansum"])


@pytest.mark.parametrize("name", ["prometheus3_utf8.prom", "openmetrics_utf8.om.txt"])
def test_quoted_utf8_metric_and_label_names(name):
    result = parse_exposition(fixture(name))
    assert result.rejected == {}
    values = raw(result)
    assert values[("go.gc_duration_seconds", (("quantile", "0"),))] == 4.9351e-05
    assert values[("go.gc_duration_seconds", (("a", "b"), ("quantile", "0.5")))] == 8.3835e-05
    odd = 'Heizölrückstoßabdämpfung 10€ metric with "interesting" {character\nchoices}'
    assert values[(odd, (("strange©™\n'quoted' \"name\"", "6"),))] == 10.0
    if name.startswith("openmetrics"):
        assert values[("http.status", (("a", "b"), ("q", "0.9")))] == 8.3835e-05  # name between labels
        assert values[("quotedexemplar2_count", ())] == 1
        assert "go.gc_duration_seconds_created" not in by_name(to_samples(result))
    fams = {f.name: f for f in result}
    assert fams["go.gc_duration_seconds"].type == "summary"


# --- one bad family drops only that family -------------------------------------------------------------------------
def test_str_splitlines_separators_inside_label_values():
    seps = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]
    text = "# TYPE info gauge\n" + "".join(f'info{{i="{i}",v="a{c}b"}} 1\n' for i, c in enumerate(seps))
    result = parse_exposition(text.replace("\n", "\r\n"))
    assert result.rejected == {}
    assert [s.labels["v"] for s in result[0].samples] == [f"a{c}b" for c in seps]


def test_a_bad_family_is_dropped_alone_and_counted_by_reason():
    text = (
        "# TYPE good gauge\ngood 1\n"
        '# TYPE lat histogram\nlat_bucket{le="1"} 1\nlat_bucket{le="+Inf"} x\nlat_count 2\nlat_sum 3\n'
        'worse{a="1"\n'
        'dup{a="1",a="2"} 1\n'
        "<html><body>502 Bad Gateway</body></html>\n"
        "# TYPE t weird\nt 1\n"
        "after 2\n"
    )
    result = parse_exposition(text)
    assert [f.name for f in result] == ["good", "after"]
    assert result.rejected == {"bad_value": 1, "bad_labels": 1, "duplicate_label": 1, "bad_line": 1, "bad_type": 1}
    assert result.dropped == {"lat": "bad_value", "worse": "bad_labels", "dup": "duplicate_label", "t": "bad_type"}
    assert [p.line_no for p in result.problems] == [5, 8, 9, 10, 11]
    assert "lat_bucket" in str(result.problems[0]) and "not a number" in str(result.problems[0])


@pytest.mark.parametrize(
    "bad",
    [
        # from prometheus/prometheus model/textparse {promparse,openmetricsparse}_test.go *ParseErrors
        "a{b='c'} 1",
        "a{b=",
        'a{\xff="foo"} 1',
        '{"a", "b = "c"}',
        '{"a",b\\nc="d"} 1',
        "a true",
        'something_weird{problem="',
        'empty_label_name{=""} 0',
        "{A}0",
        "foo 1_2",
        "foo 0x1p-3",
        "foo 0 1_2",
        '{a="ok"} 1',
        'a{,b="c"} 1',
        'a{b="c"d="e"} 1',
        'a{b="c",,d="e"} 1',
        "a 1 1 1",
        "a 1 NaN",
        "custom_metric_total 1 # {aa=bb}",
        'custom_metric_total 1 # {aa="bb",,cc="dd"} 1',
        'custom_metric_total 1 # {aa="bb"} true',
        "custom_metric_total 1 # {bb}",
        'x{"a","b"} 1',
        'x{""="v"} 1',
    ],
)
def test_prometheus_parse_errors_reject_one_family(bad):
    result = parse_exposition(f"before 1\n{bad}\nafter 2\n")
    assert {f.name for f in result} == {"before", "after"}
    assert sum(result.rejected.values()) == 1 and result.problems[0].line_no == 2


def test_eof_unit_timestamps_and_comments():
    text = (
        "# HELP x Seconds \\\\ and \\n.\n# TYPE x gauge\n# UNIT x seconds\n# just a comment\n#\n"
        "x 1 1520879607789\n# EOF\nlate 1\n"
    )
    result = parse_exposition(text)
    assert [s.value for s in to_samples(result)] == [1.0] and result[0].help == "Seconds \\ and \n."
    assert result.rejected == {"after_eof": 1}


# --- limits ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("limits", "text", "reason", "kept"),
    [
        (Limits(max_line_length=40), 'ok 1\nlong{a="' + "x" * 40 + '"} 1\nlong{a="y"} 1\n', "line_too_long", ["ok"]),
        (Limits(max_labels=2), 'ok{a="1",b="2"} 1\nwide{a="1",b="2",c="3"} 1\n', "too_many_labels", ["ok"]),
        (Limits(max_label_name=3), 'ok{abc="1"} 1\nbad{abcd="1"} 1\n', "label_name_too_long", ["ok"]),
        (Limits(max_label_value=3), 'ok{a="a\\nb"} 1\nbad{a="abcd"} 1\n', "label_value_too_long", ["ok"]),
        (Limits(max_samples=3), "a 1\nb 1\nb 2\nb 3\nc 1\n", "too_many_samples", ["a"]),
        (Limits(max_families=2), "a 1\nb 1\nc 1\n# TYPE d gauge\nd 1\n", "too_many_families", ["a", "b"]),
    ],
)
def test_limits_drop_and_count(limits, text, reason, kept):
    result = parse_exposition(text, limits)
    assert [f.name for f in result] == kept and reason in result.rejected


def test_default_limits():
    lim = Limits()
    assert (lim.max_line_length, lim.max_labels, lim.max_label_value, lim.max_samples) == (65536, 64, 4096, 100_000)
    result = parse_exposition("big{" + ",".join(f'l{i}="v"' for i in range(65)) + "} 1\nsmall 1\n")
    assert [f.name for f in result] == ["small"] and result.rejected == {"too_many_labels": 1}


@pytest.mark.parametrize(
    "line",
    [
        "x{a" + " " * 65000 + "!",
        'x{"q"' + " " * 65000 + "!",
        'x{a="b"' + " " * 65000 + "!",
        'x{a="' + "\\\\" * 32000,
        "{" * 65000,
        "x 1 # {" + 'a="b",' * 10000 + "} 1",
        "# TYPE " + '"' * 65000,
    ],
)
def test_a_hostile_line_at_the_length_limit_is_rejected_quickly(line):
    """One 64 KiB line, no backtracking blow-up (blanks in a label set took ~30 s with two `[ \\t]*` in a row)."""
    start = time.perf_counter()
    result = parse_exposition(f"ok 1\n{line}\n")
    assert time.perf_counter() - start < 1.0
    assert [f.name for f in result] == ["ok"] and sum(result.rejected.values()) == 1


SMALL = Limits(max_line_length=120, max_labels=3, max_label_name=8, max_label_value=12, max_families=4, max_samples=9)
PIECES = st.sampled_from(
    [
        "x",
        "x_total",
        "h_bucket",
        '{"q.n"',
        "{",
        "}",
        "a",
        "=",
        '"',
        '\\"',
        "\\",
        ",",
        " ",
        "\t",
        "\n",
        "\r",
        "\x1c",
        "\u2028",
        "#",
        "# TYPE x counter\n",
        "# TYPE h histogram\n",
        "# EOF\n",
        'le="',
        "1",
        "-1.5e3",
        "+Inf",
        "NaN",
        "1_0",
        "é",
        "\x00",
        "\ufffd",
    ]
)


def check_bounded(result, limits):
    assert len(result) <= limits.max_families
    assert sum(len(f.samples) for f in result) <= limits.max_samples
    for f in result:
        for s in f.samples:
            assert len(s.labels) <= limits.max_labels and s.name and isinstance(s.value, float)
            assert all(
                len(k) <= limits.max_label_name and len(v) <= limits.max_label_value for k, v in s.labels.items()
            )
    assert sum(result.rejected.values()) >= len(result.dropped) and len(result.problems) <= 16


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), st.lists(PIECES, max_size=120).map("".join)))
def test_never_raises_and_stays_within_the_limits(text):
    for limits in (SMALL, None):
        result = parse_exposition(text, limits)
        check_bounded(result, limits or Limits())
        to_samples(result, errors=[])


# --- the pipeline keeps the good families ---------------------------------------------------------------------------
def test_pipeline_keeps_good_families_and_counts_rejections():
    b = SnapshotBuilder()
    body = fixture("node_exporter_dmi.prom") + 'node_broken{a="1" 3\n'
    snap = b.build(ScrapeRecord(ts=100, node="n1", job="node", body=body, interval_s=5))
    assert snap.error is None
    assert next(snap.find("node_dmi_info")).labels["product_version"] == "\ufffd\x1c[\ufffd"
    assert b.rejected == {"bad_labels": 1} and b.parse_errors == 1
    garbage = b.build(ScrapeRecord(ts=105, node="n1", job="node", body="<html>\n</html>\n", interval_s=5))
    assert garbage.error.startswith("unparsable exposition: line 1") and garbage.gap
