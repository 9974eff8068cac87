"""The worker's rule coverage (streams/coverage_watch.py): judged after a window of event time, logged and
exported once, then again when coverage changes."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from tailhound.snapshot import GaugeSample, Snapshot
from tailhound.streams.coverage_watch import CoverageWatch
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text

RULES = RuleSet(
    rules=parse_rule_text(
        """
groups:
  - name: g
    rules:
      - name: hot-and-slow
        scope: gpu
        severity: critical
        root_cause: gpu-thermal-throttle
        when:
          all:
            - {signal: gpu.temperature, at_least: 85}
            - {signal: gpu.sm_clock_ratio, below: 0.8}
      - name: hot
        scope: gpu
        severity: warning
        root_cause: gpu-thermal-throttle
        when: {signal: gpu.temperature, at_least: 85}
""",
        "test.yaml",
    )
)


def dcgm(ts: float, *names: str, node: str = "gpu-node-1") -> Snapshot:
    samples = [GaugeSample(name=n, labels={"gpu": "0"}, value=1.0) for n in names]
    return Snapshot(ts=ts, node=node, source="dcgm", interval_s=15, labels={}, samples=samples)


def blind(watch: CoverageWatch, rule: str, severity: str) -> float | None:
    return watch.registry.get_sample_value("tailhound_rule_blind", {"rule": rule, "severity": severity})


def test_blind_rules_are_reported_after_the_window_then_when_coverage_changes():
    logged: list[tuple[int, str]] = []
    watch = CoverageWatch(RULES, window_s=300, rescan_s=60, emit=lambda level, msg: logged.append((level, msg)))
    base = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK")
    assert watch.observe(dcgm(1000, *base)) == []
    assert watch.observe(dcgm(1200, *base)) == []  # still inside the first window: coverage unknown
    assert blind(watch, "hot-and-slow", "critical") is None

    records = watch.observe(dcgm(1300, *base))
    assert records == logged
    warnings = [m for level, m in records if level == logging.WARNING]
    assert warnings == [
        "rule hot-and-slow (critical) cannot fire with the signals received: gpu.sm_clock_max missing "
        "(for gpu.sm_clock_ratio): add this line to dcgm-exporter's counters file (-f / DCGM_EXPORTER_COLLECTORS): "
        "DCGM_FI_DEV_MAX_SM_CLOCK, gauge, Maximum supported SM clock for the device (in MHz)."
    ]
    assert records[-1] == (
        logging.INFO,
        "rule coverage after 300 s of telemetry: 2 rules: 1 ok, 0 partial, 1 blind (1 critical) (2 signals from dcgm)",
    )
    assert blind(watch, "hot-and-slow", "critical") == 1 and blind(watch, "hot", "warning") == 0
    assert watch.registry.get_sample_value("tailhound_signals_present") == 2

    assert watch.observe(dcgm(1315, *base)) == []  # nothing new: nothing said
    # the max clock appears; this node and source is looked at again once RESCAN_S has passed
    assert watch.observe(dcgm(1330, *base, "DCGM_FI_DEV_MAX_SM_CLOCK")) == []
    records = watch.observe(dcgm(1360, *base, "DCGM_FI_DEV_MAX_SM_CLOCK"))
    assert records[0] == (logging.INFO, "rule hot-and-slow (critical) can fire now (ok)")
    assert blind(watch, "hot-and-slow", "critical") == 0


def test_another_node_is_looked_at_on_its_first_snapshot():
    watch = CoverageWatch(RULES, window_s=0, rescan_s=60, emit=lambda *_: None)
    watch.observe(dcgm(1000, "DCGM_FI_DEV_GPU_TEMP"))
    watch.observe(dcgm(1001, "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK", node="gpu-node-2"))
    assert watch.present == {"gpu.temperature", "gpu.sm_clock", "gpu.sm_clock_max"}
    assert blind(watch, "hot-and-slow", "critical") == 0


def test_unmapped_metrics_are_not_remembered_and_a_failure_never_reaches_the_worker(caplog):
    watch = CoverageWatch(RULES, window_s=0, registry=CollectorRegistry(), emit=lambda *_: None)
    watch.observe(dcgm(1000, *(f"SOMETHING_{i}" for i in range(100))))
    assert watch.present == set() and len(watch._mapped) == 0

    class Broken:
        ts = 2000.0
        node = "x"

        @property
        def source(self):
            raise RuntimeError("boom")

    assert watch.observe(Broken()) == []  # type: ignore[arg-type]
    assert "rule coverage failed" in caplog.text
    assert watch.observe(dcgm(3000, "DCGM_FI_DEV_GPU_TEMP")) == []  # off from now on
