"""One remote-write request in: an HTTP status, the snapshots to publish and the rejects to dead-letter out.

:class:`RemoteWriteIngest` is the receiver without its server: :meth:`~RemoteWriteIngest.accept` takes the body
and the headers of a ``POST`` and answers what Prometheus must be told, in order of the checks:

- **401** (``WWW-Authenticate``): bearer tokens or basic-auth users are configured and the request has none of
  them. Nothing is dead-lettered (anyone can send anything to an open port).
- **415**: not ``Content-Encoding: snappy`` and ``Content-Type: application/x-protobuf`` (a remote-write 2.0
  ``proto=io.prometheus.write.v2.Request`` included), or an ``X-Prometheus-Remote-Write-Version`` other than
  0.1.x/1.x (absent is accepted unless :attr:`IngestConfig.require_version`).
- **413**: a body, a decompressed body or a request over :class:`~tailhound.ingest.remote_write.DecodeLimits`.
- **503** (or 429, :attr:`IngestConfig.busy_status`) with ``Retry-After``: the publisher is behind (its
  ``backlog()`` reached :attr:`IngestConfig.max_backlog`); the body is not even decoded. Prometheus 2.x retries
  a 5xx (with its own backoff) but *drops* a batch answered 429 unless ``queue_config.retry_on_http_429: true``
  (checked with Prometheus 2.42: tests/ingest/fixtures/README.md), so 503 is the default.
- **400**: a payload that is not remote write (bad snappy, malformed protobuf ...): permanently bad, so
  Prometheus must not send it again (it does not retry a 4xx other than 429).
- **204**: accepted. Series that cannot make a snapshot (no node label, a job that is not a source name, over
  the snapshot's label limits) are left out and come back as rejects (one per kind, counted, with an
  example); the rest is grouped per scrape (:class:`~tailhound.ingest.grouping.Grouper`) and the scrapes that
  are complete come back as snapshots, built by the agent's
  :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder` (deltas, resets, gaps exactly as for the agent).

Every reject of a request that got past authentication can become a
:class:`~tailhound.deadletter.DeadLetter` (:meth:`Reject.dead_letter`). Scrapes complete later (nothing came for
them for ``settle_s``) come out of :meth:`~RemoteWriteIngest.poll`, which the server calls on a timer; at
shutdown :meth:`~RemoteWriteIngest.close` hands out what is still open.

An aiohttp handler (requests one at a time: the object is not thread-safe)::

    async def write(request: web.Request) -> web.Response:
        body = await request.content.read(ingest.max_body_bytes + 1)
        result = ingest.accept(body, request.headers)
        publish(result.snapshots)
        dead_letter([r.dead_letter(topic) for r in result.rejects])
        return web.Response(status=result.status, headers=result.headers, text=result.message)
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import Catalog
from tailhound.deadletter import DeadLetter
from tailhound.durations import WholeSeconds
from tailhound.ingest.grouping import DEFAULT_GROUPING, Forget, Grouper, GroupingConfig, SeriesReject
from tailhound.ingest.ha_dedup import HaTracker
from tailhound.ingest.remote_write import DEFAULT_DECODE_LIMITS, DecodeLimits, RemoteWriteError, decode_write_request
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import LIMITS, Snapshot

log = logging.getLogger("tailhound.ingest")

CONTENT_TYPE = "application/x-protobuf"
PROTO_V1 = "prometheus.WriteRequest"


class IngestConfig(BaseModel):
    """The receiver's settings (the grouping's are under ``grouping``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grouping: GroupingConfig = DEFAULT_GROUPING
    limits: DecodeLimits = DEFAULT_DECODE_LIMITS
    bearer_tokens: tuple[SecretStr, ...] = Field(
        default=(), description="Accepted `Authorization: Bearer` tokens (Prometheus' remote_write authorization)."
    )
    basic_auth: dict[str, SecretStr] = Field(
        default_factory=dict, description="Accepted basic-auth users and passwords (remote_write basic_auth)."
    )
    max_backlog: int = Field(
        default=10_000, ge=1, description="Snapshots the publisher may hold unsent before requests are refused."
    )
    busy_status: Literal[429, 503] = Field(
        default=503,
        description="Status when busy: Prometheus 2.x retries 503, and 429 only with "
        "queue_config.retry_on_http_429 (which then honours Retry-After).",
    )
    retry_after_s: WholeSeconds = Field(default=5, ge=1, le=3600, description="Retry-After when busy.")
    require_version: bool = Field(
        default=False, description="Refuse requests without X-Prometheus-Remote-Write-Version."
    )


DEFAULT_INGEST = IngestConfig()


class Reject(NamedTuple):
    """Input left out: a countable ``kind`` (``bad_snappy``, ``no_node`` ...), the reason for people, the
    ``stage`` (``decode``, ``headers``, ``series``, ``limits``, ``build``), how many series or requests, the node
    when known, and the bytes to keep (the request body, or an example series)."""

    kind: str
    reason: str
    stage: str
    count: int = 1
    node: str | None = None
    payload: bytes = b""

    def dead_letter(self, topic: str, ts: float | None = None) -> DeadLetter:
        """The dead-letter record of this reject (the payload cut to the dead letter's limit)."""
        reason = self.reason if self.count == 1 else f"{self.reason} ({self.count} series)"
        return DeadLetter.from_bytes(
            self.payload,
            reason=reason,
            key=self.node,
            stage=self.stage,
            kind=self.kind,
            topic=topic,
            ts=time.time() if ts is None else ts,
        )


class IngestResult(NamedTuple):
    """What :meth:`RemoteWriteIngest.accept` decided: the HTTP status, Retry-After seconds (busy only), the
    snapshots to publish (scrapes completed by this request or before it) and the rejects."""

    status: int
    retry_after: int | None
    snapshots: list[Snapshot]
    rejects: list[Reject]

    @property
    def headers(self) -> dict[str, str]:
        out = {}
        if self.retry_after is not None:
            out["Retry-After"] = str(self.retry_after)
        if self.status == 401:
            out["WWW-Authenticate"] = 'Bearer realm="tailhound"'
        return out

    @property
    def message(self) -> str:
        """A line for the response body (Prometheus logs it with the status)."""
        if self.status < 300:
            return ""
        if self.status == 401:
            return "unauthorized\n"
        if self.retry_after is not None:
            return f"busy: retry in {self.retry_after} s\n"
        return (self.rejects[0].reason if self.rejects else "refused") + "\n"


class Emitted(NamedTuple):
    """Snapshots and rejects handed out outside a request (:meth:`RemoteWriteIngest.poll`, ``close``)."""

    snapshots: list[Snapshot]
    rejects: list[Reject]


def _labels_text(labels: Iterable[tuple[str, str]]) -> bytes:
    return ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}").encode("utf-8", "replace")


class RemoteWriteIngest:
    """Remote-write requests -> snapshots, as the agent would have built them from the scraped pages.

    `backlog` tells how many snapshots the publisher holds unsent (back-pressure); `clock` gives the
    monotonic seconds the grouping settles by (`now` arguments override it, for tests)."""

    def __init__(
        self,
        config: IngestConfig | None = None,
        *,
        builder: SnapshotBuilder | None = None,
        catalog: Catalog | None = None,
        backlog: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        ha: HaTracker | None = None,
    ) -> None:
        self.config = config or DEFAULT_INGEST
        self.ha = ha
        self.builder = builder or SnapshotBuilder(catalog)
        self.grouper = Grouper(self.config.grouping, self.builder.catalog)
        self.backlog = backlog
        self.clock = clock
        self.stats: dict[str, int] = {}
        self._tokens = [t.get_secret_value().encode() for t in self.config.bearer_tokens]
        self._users = {u.encode(): p.get_secret_value().encode() for u, p in self.config.basic_auth.items()}

    @property
    def max_body_bytes(self) -> int:
        """Read at most one byte more than this from a request (a larger body is refused, 413)."""
        return self.config.limits.max_body_bytes

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def _answer(
        self,
        status: int,
        snapshots: list[Snapshot] | None = None,
        rejects: list[Reject] | None = None,
        retry_after: int | None = None,
    ) -> IngestResult:
        self._count(f"status_{status}")
        return IngestResult(status, retry_after, snapshots or [], rejects or [])

    # -- checks ----------------------------------------------------------------------------------------------

    def _authorized(self, authorization: str) -> bool:
        if not self._tokens and not self._users:
            return True
        scheme, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        ok = False
        if scheme.lower() == "bearer" and self._tokens:
            given = credentials.encode()
            for token in self._tokens:  # every one: no early exit to time
                ok |= hmac.compare_digest(given, token)
        elif scheme.lower() == "basic" and self._users:
            try:
                user, sep, password = base64.b64decode(credentials, validate=True).partition(b":")
            except (binascii.Error, ValueError):
                return False
            expected = self._users.get(user)
            ok = bool(sep) and expected is not None and hmac.compare_digest(password, expected)
        return ok

    def _media_problem(self, h: Mapping[str, str]) -> str | None:
        encoding = h.get("content-encoding", "").strip().lower()
        if encoding != "snappy":
            return f"Content-Encoding {encoding or '(none)'!r}: remote write 1.0 is snappy-compressed"
        media, *params = (p.strip() for p in h.get("content-type", "").split(";"))
        if media.lower() != CONTENT_TYPE:
            return f"Content-Type {media or '(none)'!r}: remote write 1.0 is {CONTENT_TYPE}"
        for p in params:
            key, _, value = p.partition("=")
            if key.strip().lower() == "proto" and value.strip().strip('"') != PROTO_V1:
                return f"protobuf message {value.strip()[:80]!r}: only remote write 1.0 ({PROTO_V1}) is supported"
        version = h.get("x-prometheus-remote-write-version", "").strip()
        if not version:
            return "no X-Prometheus-Remote-Write-Version header" if self.config.require_version else None
        if version.split(".", 1)[0] not in ("0", "1"):
            return f"remote write version {version[:40]!r}: only 1.0 (0.1.0) is supported"
        return None

    # -- requests --------------------------------------------------------------------------------------------

    def accept(self, body: bytes, headers: Mapping[str, str], now: float | None = None) -> IngestResult:
        """One ``POST`` of remote write: its status, and the snapshots and rejects it leads to."""
        h = {k.lower(): v for k, v in headers.items()}
        if not self._authorized(h.get("authorization", "")):
            return self._answer(401)
        problem = self._media_problem(h)
        if problem is not None:
            return self._answer(415, rejects=[Reject("unsupported_media", problem, "headers", payload=body)])
        lim = self.config.limits
        if len(body) > lim.max_body_bytes:
            reason = f"request body over {lim.max_body_bytes} bytes"
            return self._answer(413, rejects=[Reject("too_large", reason, "decode", payload=body)])
        if self.backlog is not None and self.backlog() >= self.config.max_backlog:
            return self._answer(self.config.busy_status, retry_after=self.config.retry_after_s)
        try:
            request = decode_write_request(body, lim)
        except RemoteWriteError as exc:
            log.warning("remote write refused (%s): %s", exc.reason, exc.message)
            return self._answer(exc.status, rejects=[Reject(exc.reason, exc.message, "decode", payload=body)])
        now = self.clock() if now is None else now
        grouper = self.grouper
        grouper.add_metadata(request.metadata)
        series = request.series if self.ha is None else self.ha.filter(request.series, now)
        rejects = [self._series_reject(r) for r in grouper.add(series, now)]
        for kind, n in request.skipped.items():
            self._count(f"skipped_{kind}", n)
        self._count("series", len(request.series))
        snapshots, more = self._build(grouper.ready(now))
        return self._answer(204, snapshots, rejects + more)

    def poll(self, now: float | None = None) -> Emitted:
        """The scrapes that settled since the last call (call it every second or so)."""
        return Emitted(*self._build(self.grouper.ready(self.clock() if now is None else now)))

    def close(self) -> Emitted:
        """Everything still open (at shutdown: the last scrapes may be incomplete)."""
        return Emitted(*self._build(self.grouper.drain()))

    def _series_reject(self, r: SeriesReject) -> Reject:
        return Reject(r.kind, r.reason, "series", r.count, payload=_labels_text(r.example))

    def _build(self, items: list[ScrapeRecord | Forget]) -> tuple[list[Snapshot], list[Reject]]:
        snapshots, rejects = build_snapshots(self.builder, items)
        self._count("snapshots", len(snapshots))
        return snapshots, rejects


def build_snapshots(
    builder: SnapshotBuilder,
    items: Iterable[ScrapeRecord | Forget],
    prepare: Callable[[ScrapeRecord], ScrapeRecord] | None = None,
) -> tuple[list[Snapshot], list[Reject]]:
    """The grouping's records through the agent's builder (`prepare` first, when given), in order: a
    :class:`Forget` drops that source's builder state; a scrape that cannot make a snapshot, or one over the
    snapshot's sample limit, is a reject (one bad scrape must not fail the rest: Prometheus would resend it
    forever). Shared by remote write and federation."""
    snapshots: list[Snapshot] = []
    rejects: list[Reject] = []
    for item in items:
        if isinstance(item, Forget):
            # the builder keeps a source's state under (node, job, record labels); drop that one only
            builder._sources.pop((item.node, item.source, tuple(sorted(item.labels.items()))), None)
            continue
        rec = item if prepare is None else prepare(item)
        try:
            snap = builder.build(rec)
        except Exception as exc:
            log.exception("%s/%s: no snapshot", rec.node, rec.job)
            rejects.append(
                Reject(
                    "build_failed",
                    f"{type(exc).__name__}: {str(exc)[:300]}",
                    "build",
                    node=rec.node,
                    payload=rec.to_line().encode(),
                )
            )
            continue
        if len(snap.samples) > LIMITS.max_samples:
            rejects.append(
                Reject(
                    "too_many_samples",
                    f"a snapshot of {snap.source} with {len(snap.samples)} samples (at most {LIMITS.max_samples})",
                    "limits",
                    node=snap.node,
                    payload=rec.to_line().encode(),
                )
            )
            continue
        snapshots.append(snap)
    return snapshots, rejects
