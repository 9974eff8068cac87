"""The node stage as a pipeline of explicit steps, each a module with one signature, the way ``notifier/stages/``
is: ``stage(step: Step) -> bool`` reads and fills the :class:`Step` of one snapshot and returns False to end the
pipeline for it (a redelivered snapshot stops at ``admit``).

:data:`PIPELINE`: :mod:`.admit` (event time per source; redeliveries change nothing) -> :mod:`.signals`
(canonical values merged into the node's latest view) -> :mod:`.windows` (trends, demand, baselines, the
evaluation context) -> :mod:`.rules` (pending, firing, stopped) -> :mod:`.correlation` (incident events).
Pure: no I/O, event time only; :func:`tailhound.streams.evaluator.evaluate` runs it for the worker and replay.
"""

from __future__ import annotations

from . import admit, correlation, rules, signals, windows
from .step import Stage, Step

__all__ = ["PIPELINE", "STAGE_NAMES", "Stage", "Step"]

PIPELINE: tuple[Stage, ...] = (admit.stage, signals.stage, windows.stage, rules.stage, correlation.stage)
#: the stages' names, as metrics label them
STAGE_NAMES: tuple[str, ...] = ("admit", "signals", "windows", "rules", "correlation")
