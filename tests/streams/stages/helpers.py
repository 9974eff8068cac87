"""Hand-made rules, snapshots and the :class:`Step` evaluate() would build, for the node-stage tests."""

from __future__ import annotations

from tailhound.catalog import default_catalog
from tailhound.snapshot import GaugeSample, Snapshot
from tailhound.streams.latest_values import LatestValues
from tailhound.streams.node_state import NodeState
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text
from tailhound.streams.stages import Step

T0 = 1_767_225_600.0


def ruleset(
    when: str, name: str = "r", scope: str = "engine", extra: str = "", root_cause: str = "capacity"
) -> RuleSet:
    """One rule (`extra`: more YAML lines of the rule, indented by 8)."""
    text = f"""\
groups:
  - name: g
    rules:
      - name: {name}
        scope: {scope}
        when: {when}
        root_cause: {root_cause}
{extra}"""
    return RuleSet(rules=parse_rule_text(text, "x.yaml"))


def vllm(
    ts: float,
    waiting: float,
    engine: str = "0",
    model: str | None = None,
    node: str = "n",
    labels: dict[str, str] | None = None,
    running: float | None = None,
) -> Snapshot:
    """A vLLM snapshot of one engine's queue (and running batch)."""
    sample_labels = {"engine": engine, **({"model_name": model} if model else {})}
    samples = [GaugeSample(name="vllm:num_requests_waiting", labels=sample_labels, value=waiting)]
    if running is not None:
        samples.append(GaugeSample(name="vllm:num_requests_running", labels=sample_labels, value=running))
    return Snapshot(ts=ts, node=node, source="vllm", interval_s=15, labels=labels or {}, samples=samples)


def step_for(
    snapshot: Snapshot,
    rules: RuleSet,
    state: NodeState | None = None,
    latest: LatestValues | None = None,
    stale_after_s: float = 120.0,
    **kw,
) -> Step:
    """The step of `snapshot`, as :func:`tailhound.streams.evaluator.evaluate` builds it before its stages run."""
    state = state if state is not None else NodeState(node=snapshot.node)
    latest = latest if latest is not None else LatestValues()
    state._latest = latest
    return Step(
        state=state,
        snapshot=snapshot,
        rules=rules,
        catalog=default_catalog(),
        latest=latest,
        stale_after_s=stale_after_s,
        **kw,
    )
