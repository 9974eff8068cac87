"""Hot reload of the rule pack (streams/reload.py): a valid pack is swapped in, an invalid one rejected with
every problem while the old rules keep running, the file watch notices changes; rules that are gone leave
their incidents (resolved, or re-rooted on a remaining cause) without losing the node's state."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry

from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.reload import RuleReloader
from tailhound.streams.resolutions import RESOLUTION_LABEL, RULE_REMOVED
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

T0 = 1_767_225_600.0
RULE = """groups:
  - name: t
    rules:
      - name: {name}
        scope: gpu
        when: {{signal: gpu.temperature, above: {limit}}}
        severity: critical
        root_cause: {cause}
"""


def write(path, name="hot", limit=85, cause="gpu-thermal-throttle"):
    path.write_text(RULE.format(name=name, limit=limit, cause=cause))


def sample(registry: CollectorRegistry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, labels or None)


def test_a_valid_pack_is_swapped_in_and_an_invalid_one_rejected(tmp_path):
    write(tmp_path / "t.yaml")
    applied = []
    reg = CollectorRegistry()
    reloader = RuleReloader(tmp_path, load_rules(tmp_path), applied.append, registry=reg, clock=lambda: 1000.0)
    v0 = reloader.version
    assert v0.startswith("sha256:") and sample(reg, "tailhound_rules_info", version=v0) == 1.0

    (tmp_path / "t.yaml").write_text(
        RULE.format(name="hot", limit=85, cause="gpu-thermal-throttle").replace("critical", "critcal")
        + "      - name: hot\n"
    )
    bad = reloader.reload("test")
    assert not bad.ok and applied == [] and reloader.version == v0
    assert len(bad.problems) >= 2 and any("did you mean 'critical'?" in p for p in bad.problems)
    assert sample(reg, "tailhound_rules_reloads_total", result="failure") == 1.0
    assert sample(reg, "tailhound_rules_last_reload_successful") == 0.0

    write(tmp_path / "t.yaml", limit=95)
    good = reloader.reload("test")
    assert good.ok and good.changed and len(applied) == 1 and reloader.version != v0
    assert applied[0].by_name("hot").thresholds()[0].threshold == 95
    assert sample(reg, "tailhound_rules_reloads_total", result="success") == 1.0
    assert sample(reg, "tailhound_rules_last_reload_successful") == 1.0
    assert sample(reg, "tailhound_rules_info", version=v0) is None
    assert sample(reg, "tailhound_rules_info", version=reloader.version) == 1.0


def test_the_file_watch_reloads_only_when_a_rule_file_changed(tmp_path):
    f = tmp_path / "t.yaml"
    write(f)
    applied = []
    reloader = RuleReloader(tmp_path, load_rules(tmp_path), applied.append)
    assert reloader.poll() is None
    write(f, limit=90)
    os.utime(f, ns=(f.stat().st_mtime_ns + 10**9,) * 2)
    result = reloader.poll()
    assert result is not None and result.ok and len(applied) == 1
    assert reloader.poll() is None


def _feed(processor, store, ts, hot):
    snap = dcgm_snapshot(ts, node="gpu-node-2", hot=hot)
    step = processor.step(store.get(snap.node), snap)
    if step.changed:
        store[snap.node] = step.state
    return step.events


def test_an_incident_whose_rule_is_removed_resolves_and_one_with_another_cause_is_re_rooted(tmp_path):
    write(tmp_path / "a.yaml", name="hot")
    write(tmp_path / "b.yaml", name="warm", limit=80, cause="gpu-memory-bandwidth")
    processor, store = SnapshotProcessor(load_rules(tmp_path)), MemoryStateStore()
    hot = {3: (88.0, 1100.0)}
    events = [e for i in range(3) for e in _feed(processor, store, T0 + 15 * i, hot)]
    assert [(e.event, e.rule) for e in events] == [("opened", "hot")]
    baselines_before = dict(store.get("gpu-node-2") or {}).get("last_ts")

    (tmp_path / "a.yaml").unlink()  # `hot` is gone: `warm` (also firing) takes the incident over
    processor.replace_rules(load_rules(tmp_path))
    events = _feed(processor, store, T0 + 45, hot)
    assert [(e.event, e.rule, e.incident_id) for e in events] == [("updated", "warm", events[0].incident_id)]
    assert events[0].root_cause == "gpu-memory-bandwidth"

    (tmp_path / "b.yaml").write_text(RULE.format(name="other", limit=99, cause="gpu-thermal-throttle"))
    processor.replace_rules(load_rules(tmp_path))
    events = _feed(processor, store, T0 + 60, hot)
    assert [e.event for e in events] == ["resolved"]
    assert events[0].labels[RESOLUTION_LABEL] == RULE_REMOVED and "was removed" in events[0].summary
    assert set((store.get("gpu-node-2") or {}).get("rules", {})) == set()
    assert baselines_before and (store.get("gpu-node-2") or {}).get("last_ts")  # the node's state carried over
