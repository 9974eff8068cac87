"""The node stage as a pipeline of explicit steps, each a module with one signature, the way
``notifier/stages/`` is: ``stage(step: Step) -> bool`` reads and fills the :class:`Step` of one snapshot and
returns False to end the pipeline for it (a redelivered snapshot stops at ``admit``).

:data:`PIPELINE`, in order:

1. :mod:`.admit`: event time per source and instance; a snapshot no newer than the last one seen from its
   source (a redelivery, at-least-once) changes nothing;
2. :mod:`.signals`: the snapshot's samples -> canonical signal values per entity (catalog, counter rates,
   histogram windows and their percentiles), merged into the node's latest view with the per-model SLA;
3. :mod:`.windows`: the short histories of trend conditions, demand (``engine.arrival_rate``) and the
   rolling baselines, and the evaluation context rules are judged in;
4. :mod:`.rules`: every rule whose signals changed (or that holds state) steps its entities: pending,
   firing (after ``for``), stopped (after ``keep_firing_for``, or stale);
5. :mod:`.correlation`: firing and pending rules -> incident events (:mod:`tailhound.streams.correlate`).

Pure: no I/O, event time only. :func:`tailhound.streams.evaluator.evaluate` builds the step and runs the
pipeline; the worker (through :class:`tailhound.streams.processor.SnapshotProcessor`) and offline replay
share it.
"""

from __future__ import annotations

from . import admit, correlation, rules, signals, windows
from .step import Stage, Step

__all__ = ["PIPELINE", "STAGE_NAMES", "Stage", "Step"]

PIPELINE: tuple[Stage, ...] = (admit.stage, signals.stage, windows.stage, rules.stage, correlation.stage)
#: the stages' names, as metrics label them
STAGE_NAMES: tuple[str, ...] = ("admit", "signals", "windows", "rules", "correlation")
