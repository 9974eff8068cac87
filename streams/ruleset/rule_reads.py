"""Which window statistics a step must compute: the ones a rule set (and the loaded load models) can read.

A histogram snapshot could derive every statistic of every window (``.p50`` ... ``.window_count``), yet the
default rules read a dozen of 31. :func:`window_stats_read` is what the node step can read: the rules' signals
and ``context``, the load shown beside latency evidence, the ``window_count`` behind each read statistic, the
inputs of read derived signals and of loaded load models. Leaving the rest out changes no verdict, event or
stored state; ``None`` stands for "all of them" (``tailhound baseline fit``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..demand import ARRIVAL_RATE, FINISHED, INFLIGHT
from ..evidence import LOAD_CONTEXT
from ..extract import DERIVED_SIGNALS, FLAG_SIGNALS, HISTOGRAM_STATS, RATE_RATIOS
from .rulefile import RuleSet

#: what a load model reads of the view besides its own signal (tailhound.streams.loadmodel.features_of)
MODEL_FEATURES = (
    "tokens.prompt.mean",
    "tokens.generation.mean",
    "engine.requests_running",
    "engine.requests_waiting",
    "engine.requests_finished.rate",
    "engine.requests_received.rate",
)

_STAT_SUFFIXES = frozenset(HISTOGRAM_STATS)


def _inputs(signal: str) -> tuple[str, ...]:
    """The signals `signal` is computed from on the view (none for a plain one)."""
    if signal in DERIVED_SIGNALS:
        return DERIVED_SIGNALS[signal][1]
    if signal in RATE_RATIOS:
        return RATE_RATIOS[signal]
    if signal in FLAG_SIGNALS:
        return (FLAG_SIGNALS[signal][1],)
    if signal == ARRIVAL_RATE:
        return (*INFLIGHT, FINISHED)
    return ()


def readable_signals(rules: RuleSet, model_signals: Iterable[str] = ()) -> frozenset[str]:
    """Every signal a step with `rules` (and load models for `model_signals`) can read of a node's view."""
    out = set(rules.reads) | set(LOAD_CONTEXT)
    for rule in rules.rules:
        out.update(rule.context)
    for signal in model_signals:
        out.add(signal)
        out.update(MODEL_FEATURES)
    todo = list(out)
    while todo:  # close over what derived signals are computed from
        for x in _inputs(todo.pop()):
            if x not in out:
                out.add(x)
                todo.append(x)
    for signal in list(out):
        base, _, suffix = signal.rpartition(".")
        if suffix in _STAT_SUFFIXES:
            out.add(f"{base}.window_count")
    return frozenset(out)


def window_stats_read(rules: RuleSet, model_signals: Iterable[str] = ()) -> frozenset[str]:
    """:func:`readable_signals`, kept with the rule set (computed once per rule set and set of models)."""
    key = ("window-stats-read", frozenset(model_signals))
    cache = rules.plan_cache
    found = cache.get(key)
    if found is None:
        found = cache[key] = readable_signals(rules, key[1])
    return found
