"""The text of a ``/federate`` exchange: the ``match[]`` selectors sent, derived from the catalog, and the body
received (text exposition format 0.0.4) -> remote-write :class:`Series`.

:func:`match_selectors`: per catalog source one ``{__name__=~"..."}`` of its metric names (a histogram's
``_bucket``, ``_sum`` and ``_count`` too), names sharing a prefix folded into one group, each selector at most
``max_length`` characters (split when longer: URLs of a few KB pass proxies), plus ``up`` so failed scrapes
are seen.

What ``/federate`` serves (Prometheus 2.x and 3.x, ``web/federate.go``), for the series its ``match[]``
selectors pick::

    # TYPE DCGM_FI_DEV_GPU_TEMP untyped
    DCGM_FI_DEV_GPU_TEMP{gpu="0",instance="10.0.0.5:9400",job="dcgm",node="gpu-1",cluster="lab"} 61 1767225600123

- one ``# TYPE name untyped`` line per metric name: federation does not keep the types (a TYPE other than
  ``untyped``, as another server may send, comes back as :class:`~tailhound.ingest.remote_write.Metadata`);
- every series with its target labels (``job``, ``instance``, relabelled ones) and the server's external labels
  appended after them (not in name order: the labels are sorted here, ``__name__`` included, as remote write
  sends them); ``instance=""`` when the series has none (an empty value is an absent label, and is dropped);
- the series' latest sample within the lookback (5 min) and *its* timestamp (unix ms): every series of one
  scrape carries that scrape's timestamp, so a body holds one scrape per target. Stale series are left out.

Values are Go floats (``NaN``, ``+Inf``, ``-Inf``, ``1.5e+06``); label values escape ``\\\\``, ``\\"`` and ``\\n``.
A line without a timestamp gets the fetch time.

Bounded: the body's size (:attr:`TextLimits.max_body_bytes`) and its sample lines
(:attr:`TextLimits.max_series`) -- over either the whole body is refused (:class:`FederateTextError`): a cut
body would make partial scrapes; a line, the labels of a series (count, name and value length). A malformed or
oversized line is counted by reason, its first example kept, and skipped: never an exception that loses the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from tailhound.catalog import Catalog
from tailhound.ingest.remote_write import METRIC_TYPES, Labels, Metadata, Series

MAX_SELECTOR = 4000
_HIST_PARTS = ("_bucket", "_sum", "_count")
_TOKEN = re.compile(r"[_:]?[^_:]+|[_:]")  # name tokens, each led by its separator: DCGM _FI _DEV _GPU _TEMP
_RE2_META = frozenset("\\.+*?()|[]{}^$")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STR = r'"(?:[^"\\]|\\.)*"'
#: one label in a label block: a name (plain or quoted, Prometheus 3), '=', a quoted value, then ',' or '}'
_LABEL = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*|" + _STR + r")\s*=\s*(" + _STR + r")\s*(?:,|$)")
#: a quoted metric name inside the braces (Prometheus 3's UTF-8 names: {"my.metric",a="b"})
_QUOTED_NAME = re.compile(r"\s*(" + _STR + r")\s*(?:,|$)")
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}
_MAX_EXAMPLE = 300  # characters of a bad line kept as its example
_MAX_CACHED = 200_000  # label blocks remembered (a pull repeats the series of the last one)


# -- the selectors --------------------------------------------------------------------------------------------


def _re_escape(text: str) -> str:
    return "".join("\\" + c if c in _RE2_META else c for c in text)


def _promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def name_regex(names: Iterable[str]) -> str:
    """A regex (RE2 and Python syntax) matching exactly `names`, names with a common prefix folded:
    ``a_b``, ``a_c`` -> ``a(?:_b|_c)``. Deterministic (sorted)."""
    root: dict = {}
    for name in names:
        node = root
        for tok in _TOKEN.findall(name):
            node = node.setdefault(tok, {})
        node[""] = {}  # a name ends here

    def render(node: dict) -> str:
        parts = [_re_escape(tok) + render(child) for tok, child in sorted(node.items()) if tok]
        if not parts:
            return ""
        if len(parts) == 1 and "" not in node:
            return parts[0]
        return "(?:" + "|".join(parts) + ")" + ("?" if "" in node else "")

    return render(root)


def _selectors(names: list[str], head: str, label: str, max_length: int, extra: str = "") -> list[str]:
    """``head{label=~"...",extra}`` for `names`, split in halves until each is at most `max_length` characters."""
    selector = f"{head}{{{label}=~{_promql_string(name_regex(names))}{extra}}}"
    if len(selector) <= max_length or len(names) == 1:
        return [selector]
    half = len(names) // 2
    return _selectors(names[:half], head, label, max_length, extra) + _selectors(
        names[half:], head, label, max_length, extra
    )


def source_metrics(catalog: Catalog, source: str) -> list[str]:
    """The sample names of `source` that the catalog maps: its metrics, a histogram's parts included."""
    names = set()
    for src, metric in catalog.by_metric:
        if src == source:
            names.add(metric)
            if catalog.kind_of(src, metric) == "histogram":
                names.update(metric + part for part in _HIST_PARTS)
    return sorted(names)


def match_selectors(
    catalog: Catalog,
    sources: Iterable[str] | None = None,
    *,
    jobs: Mapping[str, str] | None = None,
    by_job: bool = False,
    job_label: str = "job",
    matchers: Mapping[str, str] | None = None,
    max_length: int = MAX_SELECTOR,
) -> list[str]:
    """The ``match[]`` selectors for the catalog's `sources` (default all): one ``{__name__=~"..."}`` per source
    (more when longer than `max_length`), then ``up``.

    `jobs`: the job -> source mapping (:attr:`GroupingConfig.sources`); when given, ``up`` only of the jobs that
    are a source (by name or mapped: other targets would make empty snapshots), and with `by_job` each source's
    names only from those jobs (a generic name such as ``http_requests_total`` is in every job of a large
    Prometheus; a job that is no source makes no signal). `matchers`: label values every selector requires
    (one shard of a fleet: ``{cluster: a}``)."""
    known = catalog.sources()
    chosen = known if sources is None else sorted(set(sources))
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise ValueError(f"sources {unknown}: not in the catalog (it has {', '.join(known)})")
    fixed = "".join(f",{k}={_promql_string(v)}" for k, v in sorted((matchers or {}).items()))
    out: list[str] = []
    for source in chosen:
        names = source_metrics(catalog, source)
        extra = fixed
        if jobs is not None and by_job:
            own = sorted({source, *(j for j, s in jobs.items() if s == source)})
            extra += f",{job_label}=~{_promql_string('|'.join(_re_escape(j) for j in own))}"
        if names:
            out += _selectors(names, "", "__name__", max_length, extra)
    if jobs is None:
        out.append("up{" + fixed[1:] + "}" if fixed else "up")
    else:
        wanted = sorted({*chosen, *(j for j, s in jobs.items() if s in chosen)})
        out += _selectors(wanted, "up", job_label, max_length, fixed)
    return out


# -- the body -------------------------------------------------------------------------------------------------


def _too_many(limit: int) -> str:
    return f"more than {limit} series in one body (max_series: pull a large fleet in shards with federation.matchers)"


def _blank_lines(body: bytes | str) -> list:
    """The empty lines of `body` (Prometheus writes none; the line count must not hold them as series)."""
    return re.findall(b"\n(?=\n)" if isinstance(body, bytes) else "\n(?=\n)", body)


class FederateTextError(ValueError):
    """A body refused whole (over a limit): a countable ``reason`` and the message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class TextLimits:
    """What one ``/federate`` body may hold (far above a fleet's catalog series: ~300 bytes a line)."""

    max_body_bytes: int = 16 << 20  # FederationConfig's defaults
    max_series: int = 100_000  # sample lines
    max_line: int = 65_536  # characters of one line
    max_labels: int = 64  # labels of one series, __name__ included
    max_label_name: int = 1024  # characters
    max_label_value: int = 4096  # characters


DEFAULT_TEXT_LIMITS = TextLimits()


class LineProblem(NamedTuple):
    """Lines left out for one reason (``bad_labels``, ``bad_value``, ``bad_timestamp``, ``label_limits``,
    ``line_too_long``, ``bad_utf8``): how many, and the first one (cut)."""

    reason: str
    count: int
    example: str


class FederateBody(NamedTuple):
    series: list[Series]
    metadata: list[Metadata]
    problems: list[LineProblem]
    lines: int  # sample lines read (good and bad)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


class _Bad(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


class FederateParser:
    """Parses ``/federate`` bodies; remembers the label sets it parsed (bounded), so that the next pull, which
    repeats them, skips the work and hands out the same :data:`Labels` objects. Not thread-safe."""

    def __init__(self, limits: TextLimits = DEFAULT_TEXT_LIMITS) -> None:
        self.limits = limits
        self._heads: dict[str, Labels] = {}

    def parse(self, body: bytes | str, fetch_ms: int) -> FederateBody:
        """The series of `body` (one sample each: lines without a timestamp get `fetch_ms`), the non-untyped
        TYPE lines as metadata, and the lines left out. Raises :class:`FederateTextError` for a body over
        :attr:`TextLimits.max_body_bytes` or with more than :attr:`TextLimits.max_series` sample lines."""
        lim = self.limits
        if len(body) > lim.max_body_bytes:
            raise FederateTextError("too_large", f"a body of {len(body)} bytes (at most {lim.max_body_bytes})")
        # counted before any line is parsed, so a body over the limit costs milliseconds, not the parse
        nl, comment = ("\n", "\n#") if isinstance(body, str) else (b"\n", b"\n#")
        lines = body.count(nl) - body.count(comment) - (body[:1] in ("#", b"#")) - len(_blank_lines(body))
        if lines > lim.max_series:
            raise FederateTextError("too_many_series", _too_many(lim.max_series))
        problems: dict[str, list] = {}

        def bad(reason: str, line: str) -> None:
            entry = problems.get(reason)
            if entry is None:
                problems[reason] = [1, line[:_MAX_EXAMPLE]]
            else:
                entry[0] += 1

        if isinstance(body, bytes):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                text = body.decode("utf-8", "replace")
                bad("bad_utf8", f"(not UTF-8 at byte {exc.start}: bad bytes read as U+FFFD)")
        else:
            text = body
        series: list[Series] = []
        metadata: list[Metadata] = []
        heads = self._heads
        n = 0
        for line in text.split("\n"):
            if not line or line[0] == "#":
                if line.startswith("# TYPE "):
                    parts = line.split()
                    if len(parts) == 4 and parts[3] != "untyped" and parts[3] in METRIC_TYPES:
                        metadata.append(Metadata(parts[2], parts[3]))
                continue
            if line[-1] == "\r":
                line = line[:-1]
            if not line.strip():
                continue
            n += 1
            if n > lim.max_series:
                raise FederateTextError("too_many_series", _too_many(lim.max_series))
            if len(line) > lim.max_line:
                bad("line_too_long", line)
                continue
            close = line.rfind("}")  # a value and a timestamp hold no '}': the last one ends the labels
            if close >= 0:
                head, tail = line[: close + 1], line[close + 1 :]
            else:
                head, _, tail = line.partition(" ")
                if not tail:
                    head, _, tail = line.partition("\t")
            labels = heads.get(head)
            if labels is None:
                try:
                    labels = self._labels(head)
                except _Bad as exc:
                    bad(exc.reason, line)
                    continue
                if len(heads) >= _MAX_CACHED:
                    heads.clear()
                heads[head] = labels
            parts = tail.split()
            if not parts or len(parts) > 2 or (close >= 0 and tail[:1] not in (" ", "\t")):
                bad("bad_value", line)
                continue
            try:
                value = float(parts[0])
            except ValueError:
                bad("bad_value", line)
                continue
            if len(parts) == 2:
                try:
                    ts = int(parts[1])
                except ValueError:
                    bad("bad_timestamp", line)
                    continue
            else:
                ts = fetch_ms
            series.append(Series(labels, ((ts, value),)))
        out = [LineProblem(reason, count, example) for reason, (count, example) in problems.items()]
        return FederateBody(series, metadata, out, n)

    def _labels(self, head: str) -> Labels:
        """``name{a="b",...}`` -> the labels sorted by name, ``__name__`` included, empty values left out."""
        lim = self.limits
        brace = head.find("{")
        name = head if brace < 0 else head[:brace].strip()
        pairs: dict[str, str] = {}
        if brace >= 0:
            if head[-1] != "}":
                raise _Bad("bad_labels")
            end = len(head) - 1  # the closing brace
            pos = brace + 1
            if name and not _NAME.fullmatch(name):
                raise _Bad("bad_labels")
            if not name:
                m = _QUOTED_NAME.match(head, pos, end)
                if m is None:
                    raise _Bad("bad_labels")
                name = _unescape(m.group(1)[1:-1])
                pos = m.end()
            while pos < end:
                m = _LABEL.match(head, pos, end)
                if m is None:
                    if head[pos:end].strip():
                        raise _Bad("bad_labels")
                    break
                key, value = m.group(1), m.group(2)[1:-1]
                if key[0] == '"':
                    key = _unescape(key[1:-1])
                value = _unescape(value)
                if len(key) > lim.max_label_name or len(value) > lim.max_label_value:
                    raise _Bad("label_limits")
                if key in pairs or key == "__name__":
                    raise _Bad("bad_labels")  # a label twice
                if value:
                    pairs[key] = value
                    if len(pairs) >= lim.max_labels:
                        raise _Bad("label_limits")
                pos = m.end()
        elif not _NAME.fullmatch(name):
            raise _Bad("bad_labels")
        if not name or len(name) > lim.max_label_value:
            raise _Bad("bad_labels")
        pairs["__name__"] = name
        return tuple(sorted(pairs.items()))


def parse_federate(body: bytes | str, fetch_ms: int, limits: TextLimits = DEFAULT_TEXT_LIMITS) -> FederateBody:
    """One body with a parser of its own (see :meth:`FederateParser.parse`)."""
    return FederateParser(limits).parse(body, fetch_ms)
