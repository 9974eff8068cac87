"""Hot reload of the rule pack: SIGHUP, a file watch and ``POST /-/reload`` all come here.

A reload reads and checks the rules directory as ``tailhound rules check`` does, on a thread (so the loop keeps
serving); a valid pack is swapped in between two snapshots through the `apply` callback (state carries over,
incidents of removed rules resolve), an invalid one is rejected and logged and the old rules keep running: any
problem is a rejected reload, never a crash. The outcome is exported as Prometheus does
(``tailhound_rules_reloads_total``, ``..._last_reload_successful``, ``tailhound_rules_info{version}``). The file
watch compares names, sizes and modification times of the ``*.yaml`` files (a ConfigMap swap changes them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from tailhound.errors import ConfigFileError

from .ruleset.check import check_paths
from .ruleset.rulefile import RuleSet, load_rules

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    changed: bool
    version: str
    rules: int
    problems: tuple[str, ...] = ()

    def describe(self) -> str:
        if not self.ok:
            return f"rejected: {len(self.problems)} problems; the old rules keep running"
        return f"{self.rules} rules, version {self.version}" + ("" if self.changed else " (unchanged)")


def fingerprint(directory: Path) -> tuple:
    """What the file watch compares: (name, size, mtime) of every rule file, following symlinks."""
    if directory.is_file():
        files = [directory]
    else:
        try:
            files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))
        except OSError:
            return ()
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((f.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


class RuleReloader:
    def __init__(
        self,
        directory: Path,
        current: RuleSet,
        apply: Callable[[RuleSet], None],
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.current = current
        self._apply = apply
        self._clock = clock
        self._seen = fingerprint(self.directory)
        self._lock = asyncio.Lock()
        self.registry = registry if registry is not None else CollectorRegistry()
        self._reloads = Counter(
            "tailhound_rules_reloads", "Rule pack reloads by result.", ["result"], registry=self.registry
        )
        self._last_ok = Gauge(
            "tailhound_rules_last_reload_successful",
            "1 when the last reload of the rule pack succeeded (or none was tried), 0 when it "
            "was rejected and the previous rules still run.",
            registry=self.registry,
        )
        self._last_ok_ts = Gauge(
            "tailhound_rules_last_reload_success_timestamp_seconds",
            "When the rule pack in use was loaded.",
            registry=self.registry,
        )
        self._info = Gauge("tailhound_rules_info", "The rule pack in use (1).", ["version"], registry=self.registry)
        self._loaded = Gauge("tailhound_rules_loaded", "Rules running.", registry=self.registry)
        for result in ("success", "failure"):
            self._reloads.labels(result=result)
        self._last_ok.set(1)
        self._last_ok_ts.set(self._clock())
        self._show(current)

    @property
    def version(self) -> str:
        return _version(self.current)

    def reload(self, reason: str) -> ReloadResult:
        """Check and load the directory; swap the rules in when they are valid. Never raises."""
        return self._finish(reason, *self.prepare(reason))

    async def reload_async(self, reason: str) -> ReloadResult:
        """:meth:`reload` with the files read and parsed on a thread, so a slow or hostile file never stalls
        the event loop; the swap itself runs on the loop, between two snapshots. One reload at a time."""
        async with self._lock:
            new, problems = await asyncio.to_thread(self.prepare, reason)
            return self._finish(reason, new, problems)

    def prepare(self, reason: str) -> tuple[RuleSet | None, list]:
        """(the new rules, or None and every problem): the reading and checking half, safe on any thread."""
        new: RuleSet | None = None
        try:
            problems: list = list(check_paths([self.directory])[0])
            if not problems:
                new = load_rules(self.directory)
        except ConfigFileError as exc:  # the checker and the loader disagree: trust the loader
            problems = [exc]
        except Exception as exc:  # a reload must never take the worker down
            log.exception("rule reload (%s) failed", reason)
            problems = [exc]
        return new, problems

    def _finish(self, reason: str, new: RuleSet | None, problems: list) -> ReloadResult:
        self._seen = fingerprint(self.directory)
        if new is None:
            lines = tuple(p.text() if hasattr(p, "text") else str(p) for p in problems)
            for line in lines:
                log.error("rule reload (%s): %s", reason, line)
            self._reloads.labels(result="failure").inc()
            self._last_ok.set(0)
            result = ReloadResult(False, False, self.version, len(self.current.rules), lines)
            log.error("rule reload (%s) %s", reason, result.describe())
            return result
        before = self.version
        try:
            self._apply(new)
        except Exception as exc:
            log.exception("rule reload (%s): swapping the rules in failed; the old rules keep running", reason)
            self._reloads.labels(result="failure").inc()
            self._last_ok.set(0)
            return ReloadResult(False, False, before, len(self.current.rules), (repr(exc),))
        self.current = new
        self._reloads.labels(result="success").inc()
        self._last_ok.set(1)
        self._last_ok_ts.set(self._clock())
        self._show(new, before)
        result = ReloadResult(True, self.version != before, self.version, len(new.rules))
        log.info("rule reload (%s): %s", reason, result.describe())
        return result

    def changed(self) -> bool:
        """Whether the rule files changed since the last look (or reload); remembers this look."""
        now = fingerprint(self.directory)
        if now == self._seen:
            return False
        self._seen = now
        return True

    def poll(self) -> ReloadResult | None:
        """The file watch: reload when the rule files changed since the last look (or reload)."""
        return self.reload("rule files changed") if self.changed() else None

    async def poll_async(self) -> ReloadResult | None:
        """:meth:`poll` parsing off the event loop (:meth:`reload_async`)."""
        return await self.reload_async("rule files changed") if self.changed() else None

    def _show(self, rules: RuleSet, before: str | None = None) -> None:
        if before is not None and before != _version(rules):
            self._info.remove(before)
        self._info.labels(version=_version(rules)).set(1)
        self._loaded.set(len(rules.rules))


def _version(rules: RuleSet) -> str:
    return next((r.pack_version for r in rules.rules if r.pack_version), "") or "unknown"
