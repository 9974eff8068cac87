"""Where a benchmark child's time goes over its measured window: timers around the worker's parts, or yappi.

Opt-in (``BENCH_STREAMS_PROFILE=DIR``): one report per run, written when the window closes, so a profile covers
exactly what the throughput figure covers.
"""

from __future__ import annotations

import gc
import importlib
import time
from pathlib import Path

#: opt-in profiling of the Kafka children over the measured window: a folder for one report per run
PROFILE_ENV = "BENCH_STREAMS_PROFILE"
#: ``sections`` (default: timers around the worker's known parts, and GC), ``cprofile`` (the standard library's
#: deterministic profiler, the event loop's thread only, ~2x), or yappi with the ``cpu`` or ``wall`` clock
#: (every function, thread and coroutine; yappi costs ~4x and inflates Python code most)
PROFILE_MODE_ENV = "BENCH_STREAMS_PROFILE_MODE"
#: (module, class or None, function, section): sync calls of the worker, timed exclusive of each other
SECTIONS = (
    ("tailhound.streams.codec", None, "decode_snapshot", "decode (tailhound.streams.codec)"),
    ("tailhound.streams.codec", None, "_decode_bundle", "decode (tailhound.streams.codec)"),
    ("tailhound.streams.codec", None, "_decode_v3", "decode (tailhound.streams.codec)"),
    ("tailhound.streams.intake", None, "entities", "intake: entity checks (snapshot.entity_problem)"),
    ("tailhound.streams.intake", "Gate", "admit", "intake checks (key, time bounds)"),
    ("tailhound.streams.intake", "Gate", "admit_all", "intake checks (key, time bounds)"),
    ("tailhound.streams.processor", "SnapshotProcessor", "step", "step: outside its stages (state load, sync)"),
    ("tailhound.streams.model_forward", None, "encode", "model-topic forward: encode"),
    ("tailhound.streams.model_stage", "ModelStage", "add", "model stage: aggregation (its steps: rules)"),
    ("tailhound.streams.pipeline_metrics", "PipelineMetrics", "snapshot", "metrics: per-snapshot update"),
    ("tailhound.streams.gc_freeze", "WarmupFreeze", "seen", "gc freeze of the warm-up state"),
    ("faust.tables.table", "Table", "__setitem__", "table write (state JSON, changelog send)"),
)
#: the evaluator's stages (a tuple of functions it holds): each timed as "step stage: NAME"
STAGES = ("tailhound.streams.evaluator", "PIPELINE", "STAGE_NAMES")
_INHERITED = object()


class Profile:
    """Where the child's time goes between message `warmup` and `warmup + n`, written to `folder`."""

    def __init__(self, folder: Path, name: str, mode: str = "sections") -> None:
        self.path, self.mode = folder / f"{name}.{mode}.txt", mode
        self.spent: dict[str, list] = {}  # section -> [seconds, calls]
        self.stack: list[list] = []  # open sections: [name, start, time spent in sections inside it]
        self.patched: list[tuple[object, str, object]] = []  # (owner, attribute, original): undone by stop()

    def _enter(self, name: str) -> None:
        self.stack.append([name, time.perf_counter(), 0.0])

    def _exit(self) -> None:
        name, t0, inner = self.stack.pop()
        took = time.perf_counter() - t0
        spent = self.spent.setdefault(name, [0.0, 0])
        spent[0], spent[1] = spent[0] + took - inner, spent[1] + 1
        if self.stack:
            self.stack[-1][2] += took

    def _timed(self, fun, name: str):
        def timed(*args, **kwargs):
            self._enter(name)
            try:
                return fun(*args, **kwargs)
            finally:
                self._exit()

        return timed

    def _patch(self, owner: object, name: str, value: object) -> None:
        # the owner's own attribute (a class's function, not a bound one); _INHERITED: it had none of its own
        self.patched.append((owner, name, vars(owner).get(name, _INHERITED)))
        setattr(owner, name, value)

    def _gc(self, phase: str, info: dict) -> None:
        self._enter(f"garbage collection, generation {info['generation']}") if phase == "start" else self._exit()

    def start(self) -> None:
        if self.mode == "sections":
            for module, cls, fun, name in SECTIONS:
                owner = importlib.import_module(module)
                owner = getattr(owner, cls) if cls else owner
                self._patch(owner, fun, self._timed(getattr(owner, fun), name))
            module, pipeline, names = STAGES
            owner = importlib.import_module(module)
            stages = zip(getattr(owner, names), getattr(owner, pipeline), strict=True)
            self._patch(owner, pipeline, tuple(self._timed(f, f"step stage: {n}") for n, f in stages))
            gc.callbacks.append(self._gc)
        elif self.mode == "cprofile":
            import cProfile

            self.cprofile = cProfile.Profile()
            self.cprofile.enable()
        else:
            import yappi

            yappi.set_clock_type(self.mode)
            yappi.start(builtins=False, profile_threads=True)
        self.t0 = time.perf_counter()

    def stop(self, n: int) -> None:
        wall = time.perf_counter() - self.t0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.mode == "sections":
            gc.callbacks.remove(self._gc)
            for owner, name, original in reversed(self.patched):
                if original is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            self.patched.clear()
            rest = wall - sum(t for t, _ in self.spent.values())
            rows = sorted(self.spent.items(), key=lambda kv: -kv[1][0])
            rows.append(("rest: Faust, Kafka client, event loop, agent code", [rest, 0]))
            self.path.write_text(
                f"# {n} snapshots, {1e3 * wall / n:.3f} ms each (wall)\n"
                + "".join(
                    f"{1e3 * t / n:7.3f} ms {100 * t / wall:5.1f}% {c / n:6.2f}/snapshot  {name}\n"
                    for name, (t, c) in rows
                )
            )
            return
        if self.mode == "cprofile":
            self.cprofile.disable()
            self._write_cprofile(n, wall)
            return
        import yappi

        yappi.stop()
        stats = yappi.get_func_stats()
        stats.save(str(self.path.with_suffix(".pstat")), type="pstat")
        lines = [f"# thread {t.name}: {1e6 * t.ttot / n:.1f} us/snapshot" for t in yappi.get_thread_stats()]
        lines.append(f"# yappi {self.mode} clock, {n} snapshots; us per snapshot: tsub (own), ttot (with callees)")
        lines += [
            f"{1e6 * s.tsub / n:9.1f} {1e6 * s.ttot / n:9.1f} {s.ncall / n:8.2f}/snapshot  {s.module}:{s.lineno} "
            f"{s.name}"
            for s in sorted(stats, key=lambda s: s.tsub, reverse=True)[:400]
        ]
        self.path.write_text("\n".join(lines) + "\n")

    def _write_cprofile(self, n: int, wall: float) -> None:
        """The functions by own time, then by time with callees, in us per snapshot (and the .pstat file)."""
        import pstats

        self.cprofile.dump_stats(str(self.path.with_suffix(".pstat")))
        stats = pstats.Stats(self.cprofile).stats  # type: ignore[attr-defined]
        rows = [(tt, ct, nc, f"{Path(f).name}:{line} {fn}") for (f, line, fn), (_, nc, tt, ct, _) in stats.items()]
        lines = [f"# cProfile, {n} snapshots, {1e3 * wall / n:.3f} ms each (wall, profiled)"]
        for title, key in (("own time", 0), ("with callees", 1)):
            lines.append(f"## by {title}: us/snapshot own, with callees, calls/snapshot")
            for tt, ct, nc, name in sorted(rows, key=lambda r: r[key], reverse=True)[:120]:
                lines.append(f"{1e6 * tt / n:9.1f} {1e6 * ct / n:9.1f} {nc / n:8.2f}  {name}")
        self.path.write_text("\n".join(lines) + "\n")
