"""What a Prometheus that scraped the agent's targets would send: a recording's records as remote-write
requests and as /federate pages (tests compare the ingest paths with the agent path on the same data)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator

from tailhound.ingest.remote_write import Metadata, Series, encode_write_request, series_from_exposition
from tailhound.recording import ScrapeRecord

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "Prometheus/2.42.0",
}


def target_of(rec: ScrapeRecord) -> dict[str, str]:
    """The target labels Prometheus would put on the series of `rec` (its record labels are target labels)."""
    return {"job": rec.job, "node": rec.node, "instance": f"{rec.node}:9400", **rec.labels}


def ticks(records: Iterable[ScrapeRecord]) -> Iterator[tuple[float, list[ScrapeRecord]]]:
    """The records of each collection time, in order."""
    batch: list[ScrapeRecord] = []
    for rec in records:
        if batch and rec.ts != batch[0].ts:
            yield batch[0].ts, batch
            batch = []
        batch.append(rec)
    if batch:
        yield batch[0].ts, batch


class PrometheusView:
    """Per target, the series of its last scrape (for the stale markers of the next)."""

    def __init__(self) -> None:
        self.last: dict[tuple, list[Series]] = {}

    def scrape(self, rec: ScrapeRecord) -> list[Series]:
        key = (rec.node, rec.job, tuple(sorted(rec.labels.items())))
        ts_ms = round(rec.ts * 1000)
        before = self.last.get(key, [])
        if rec.error is not None:
            out = series_from_exposition(
                "", target_of(rec), ts_ms, up=False, stale=[s for s in before if s.name != "up"]
            )
            self.last[key] = []
            return out.series
        out = series_from_exposition(rec.body, target_of(rec), ts_ms)
        now = {s.labels for s in out.series}
        gone = [s for s in before if s.labels not in now]
        self.last[key] = out.series
        return out.series + [Series(s.labels, (), (ts_ms,)) for s in gone]

    @staticmethod
    def metadata_request(records: Iterable[ScrapeRecord]) -> bytes:
        """The metadata request Prometheus sends at start and every minute (the TYPE of each family)."""
        meta: dict[str, Metadata] = {}
        for rec in records:
            if rec.error is None:
                for m in series_from_exposition(rec.body, target_of(rec), 1).metadata:
                    meta.setdefault(m.family, m)
        return encode_write_request([], meta.values())

    def request(self, records: list[ScrapeRecord]) -> bytes:
        """One remote-write body with the scrapes of `records`."""
        series = [s for rec in records for s in self.scrape(rec)]
        return encode_write_request(series)


def selected(labels: dict[str, str], selectors: Iterable[str]) -> bool:
    """Whether a series with `labels` matches one of `selectors` (``name{l=~"re",l="v"}``, the forms that
    :func:`tailhound.ingest.federation.match_selectors` writes; regexes anchored, as PromQL's)."""
    return any(all(test(labels.get(k, "")) for k, test in matchers) for matchers in _compiled(tuple(selectors)))


@functools.lru_cache(maxsize=16)
def _compiled(selectors: tuple[str, ...]) -> list[list[tuple[str, Callable[[str], bool]]]]:
    out = []
    for sel in selectors:
        head, _, rest = sel.partition("{")
        matchers: list[tuple[str, Callable[[str], bool]]] = [("__name__", head.__eq__)] if head else []
        for k, op, v in re.findall(r'(\w+)(=~|=)"((?:[^"\\]|\\.)*)"', rest):
            v = re.sub(r"\\(.)", r"\1", v)
            matchers.append((k, re.compile(v).fullmatch if op == "=~" else v.__eq__))
        out.append(matchers)
    return out


def federate_page(records: Iterable[ScrapeRecord], selectors: Iterable[str] | None = None) -> str:
    """What /federate answers when the latest scrapes of its targets are `records` (one per target): every
    series with its timestamp, untyped, the series of one name together (Prometheus sorts them by name). A
    failed scrape is `up 0` alone (Prometheus marked the target's other series stale: /federate leaves stale
    series out). `selectors`: the ``match[]`` of the request (default: every series); they may test only
    ``__name__`` and ``job``, as the derived ones do."""
    sel = None if selectors is None else tuple(selectors)
    if sel is not None:
        assert all(k in ("__name__", "job") for m in _compiled(sel) for k, _ in m), sel
        picked = _picked(sel)
    rows: list[tuple[str, str, float, int]] = []
    for rec in records:
        text = "" if rec.error is not None else rec.body
        for s in series_from_exposition(text, target_of(rec), round(rec.ts * 1000), up=rec.error is None).series:
            if sel is not None:
                k = (s.name, rec.job)
                if k not in picked:
                    picked[k] = selected({"__name__": s.name or "", "job": rec.job}, sel)
                if not picked[k]:
                    continue
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels if k != "__name__")
            ts, value = s.samples[0]
            rows.append((s.name or "", labels, value, ts))
    rows.sort(key=lambda r: r[0])
    lines: list[str] = []
    family = None
    for name, labels, value, ts in rows:
        if name != family:
            family = name
            lines.append(f"# TYPE {name} untyped")
        lines.append(f"{name}{{{labels}}} {_number(value)} {ts}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=16)
def _picked(selectors: tuple[str, ...]) -> dict[tuple[str | None, str], bool]:
    """(name, job) -> whether `selectors` pick its series (remembered: pages repeat the same names)."""
    return {}


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v)) if abs(v) < 1e15 else repr(float(v))
