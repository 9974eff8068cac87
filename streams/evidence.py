"""What a firing rule shows a person: its evidence and its rendered actions (pure).

:func:`rule_evidence` turns a rule's leaves into observations (value vs threshold / baseline / other
signal, see :func:`tailhound.streams.ruleset.condition_eval.observations`) and adds the rule's context signals, with the
load of the window next to any latency percentile; :func:`render_action` fills an action template.
"""

from __future__ import annotations

import re

from tailhound.catalog import Catalog
from tailhound.incident import Evidence, Scope

from .extract import decode_clock_event_reasons
from .ruleset.condition_eval import EvalContext, observations
from .ruleset.rulefile import Rule

#: Latency percentiles are always shown with the load of the same window (the token mix and the
#: running requests): a P95 means little without what was asked of the engine.
LOAD_CONTEXT = ("tokens.prompt.mean", "tokens.generation.mean", "engine.requests_running")


def rule_evidence(rule: Rule, ctx: EvalContext, entity: str, held_s: float, catalog: Catalog) -> list[Evidence]:
    labels = {rule.scope.value: entity} if entity else {}
    out = observations(rule.leaves(), ctx, entity, rule.scope.value, held_s, labels)
    context = list(rule.context)
    if any(ev.signal.startswith(("latency.", "max(latency.", "min(latency.")) for ev in out):
        context += [c for c in LOAD_CONTEXT if c not in context]
    shown = {ev.signal for ev in out}
    for signal in context:
        if signal in shown:
            continue
        per = ctx.per(signal)
        if per and per != (rule.scope.value,):
            continue  # a finer or other-scope signal without a reduce: not this entity's
        v = (ctx.values.get(signal) or {}).get(entity if per else "")
        if v is not None:
            spec = catalog.spec(signal) or catalog.spec(signal.rpartition(".")[0])
            detail = _DETAIL[signal](v) if signal in _DETAIL else ""
            out.append(
                Evidence(
                    signal=signal,
                    value=round(v, 4),
                    op="=",
                    unit=spec.unit if spec else "",
                    labels=labels,
                    detail=detail,
                )
            )
    return out


def _clock_event_detail(mask: float) -> str:
    return f"0x{int(mask):x} (" + (", ".join(decode_clock_event_reasons(mask)) or "no clock event reason") + ")"


#: How to spell out a context value for a person.
_DETAIL = {"gpu.clock_event_reasons": _clock_event_detail}


#: ``{node}``, ``{latency.tpot.p95}``, and reduced evidence such as ``{max(gpu.dram_bw_util)}``
_PLACEHOLDER = re.compile(r"\{((?:[a-z]+\()?[a-z_][a-z0-9_.]*\)?)\}")
#: what an action shows for a placeholder whose signal did not arrive (e.g. no procnet on that node)
MISSING_VALUE = "n/a"


def render_action(template: str, scope: Scope, evidence: list[Evidence]) -> str:
    """Fill ``{node}``, ``{gpus}``, ``{model}``, ``{engine}`` and ``{<signal>}`` (max over evidence); a signal
    the incident has no value for reads ``n/a``: text for people never carries a raw placeholder."""
    values: dict[str, str] = {
        "node": scope.node or "?",
        "gpus": ",".join(scope.gpus) or "?",
        "model": scope.model or "?",
        "engine": scope.engine or "?",
    }
    for ev in evidence:
        cur = values.get(ev.signal)
        if cur is None or float(cur) < ev.value:
            values[ev.signal] = f"{ev.value:g}"
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), MISSING_VALUE), template)
