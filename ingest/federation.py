"""Federation pull: read the series the rules need from a Prometheus' ``/federate``, for teams that cannot add a
``remote_write`` to their Prometheus config.

The ``match[]`` selectors come from the catalog, never hand-written (:func:`match_selectors`, in
:mod:`tailhound.ingest.federation_text` with the body's parser): per catalog source its metric names (a
histogram's parts too), by default only from the jobs that are that source (:attr:`FederationConfig.by_job`),
plus ``up`` of those jobs, so failed scrapes are seen.

:class:`FederationPuller` GETs ``/federate`` every :attr:`FederationConfig.interval_s` (the caller's timer;
:meth:`~FederationPuller.pull_once` is one pull), reads at most :attr:`FederationConfig.max_body_bytes`, parses
the body (:mod:`tailhound.ingest.federation_text`) and files the series under their scrapes exactly as the
remote-write receiver does (:class:`~tailhound.ingest.grouping.Grouper`, same :class:`GroupingConfig`), then
builds the snapshots with the agent's :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder`.

Federation's timestamps: every series carries the timestamp of its target's latest scrape, so a pull holds
exactly one scrape per target, whole (Prometheus answers from one querier: its head isolation never shows half
a scrape's commit), and the grouping hands each out at once (``close_on_newer``, drained after every pull). A
target not scraped again since the last pull repeats its series with the same timestamps: they are counted as
``unchanged`` and left out before the grouping (no duplicate snapshot, no "late" noise). A failed scrape is
``up 0`` without the target's other series (Prometheus marked them stale): a gap snapshot, as the agent's.
Pulling less often than Prometheus scrapes skips scrapes: counter deltas then span the pulls; each snapshot's
interval is at least the pull interval, so a skipped scrape is no gap. Pulling as often as Prometheus scrapes
can alias (a pull seeing the same scrape twice, the next one skipping one: a gap with ``prev_ts`` telling).

The body is read raw and decoded as it arrives (:mod:`tailhound.ingest.federation_decode`: gzip, deflate,
brotli), never past ``max_body_bytes`` decoded: a few KB of brotli that would inflate to gigabytes is refused
after ``max_body_bytes``. A failure (connection, timeout, HTTP status, a body over the limit, an encoding it
cannot decode within the limit, not the text format) is a
:class:`~tailhound.ingest.receiver.Reject` of kind ``federate_failed`` (stage ``fetch``); a pull never raises.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import Catalog
from tailhound.durations import Duration
from tailhound.errors import PullError
from tailhound.ingest.federation_decode import BoundedDecoder, DecodeRefused, accept_encoding
from tailhound.ingest.federation_text import (  # noqa: F401 (the selectors: re-exported)
    MAX_SELECTOR,
    FederateParser,
    FederateTextError,
    TextLimits,
    match_selectors,
    name_regex,
    source_metrics,
)
from tailhound.ingest.grouping import Forget, Grouper, GroupingConfig
from tailhound.ingest.receiver import Emitted, Reject, build_snapshots
from tailhound.ingest.remote_write import Labels
from tailhound.ingest.scrape_families import GroupedRecord
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import Snapshot

log = logging.getLogger("tailhound.ingest.federation")

ACCEPT = "text/plain;version=0.0.4"
_MAX_TOKEN_BYTES = 65_536
_THREAD_BODY = 4 << 20  # bodies larger than this are parsed off the event loop
#: what a body over the limits tells the operator
SHARD_HINT = "pull a large fleet in shards (federation.matchers, one ingest each) or raise the limit"


# -- configuration ------------------------------------------------------------------------------------------

FEDERATION_GROUPING = GroupingConfig(close_on_newer=True)


class FederationConfig(BaseModel):
    """Where and how to pull (``ingest.federation`` in a config file). Secrets stay out of YAML: the bearer
    token is read from a file or an environment variable at every pull."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        pattern=r"^https?://[^\s?#]+$",
        description="The Prometheus base URL (with its route prefix, if any); /federate is appended.",
    )
    interval_s: Duration = Field(default=15.0, gt=0, le=3600, description="Seconds between pulls: the rules' interval.")
    timeout_s: Duration = Field(default=10.0, gt=0, le=300, description="Seconds one pull may take, whole.")
    match: tuple[str, ...] = Field(default=(), description="match[] selectors added to the derived ones.")
    derive_match: bool = Field(default=True, description="Derive match[] from the catalog (off: `match` only).")
    by_job: bool = Field(
        default=True,
        description="Select each source's metrics only from its jobs (the source's "
        "name and the jobs mapped to it in grouping.sources); off: from every job.",
    )
    sources: tuple[str, ...] | None = Field(default=None, description="Catalog sources to pull (default all).")
    matchers: dict[Annotated[str, StringConstraints(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")], str] = Field(
        default_factory=dict, description="Label values every derived selector requires (a shard: {cluster: a})."
    )
    # a real /federate answers ~15 KB and ~68 series per 8-GPU node (dcgm, vLLM, node_exporter: BENCHMARKS.md),
    # parsed at ~8 s of CPU per 1,000 nodes: 16 MiB is ~1,000 nodes, a pull that fits in a 15 s interval
    max_body_bytes: int = Field(
        default=16 << 20,
        ge=1024,
        le=1 << 30,
        description=(
            "Larger bodies (decoded) are refused, the whole pull fails: about 1,000 GPU nodes at ~15 KB each; "
            "a larger fleet is pulled in shards (`matchers`)."
        ),
    )
    max_series: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description=("Series in one body; more is refused, the whole pull fails (~68 a GPU node: about 1,400 nodes)."),
    )
    bearer_token_file: Path | None = Field(default=None, description="File holding the bearer token.")
    bearer_token_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Environment variable holding the bearer token."
    )
    ca_file: Path | None = Field(default=None, description="CA bundle for an https URL (default: the system's).")
    grouping: GroupingConfig = Field(
        default=FEDERATION_GROUPING,
        description="Series -> scrapes, as for remote write (jobs -> sources ...); close_on_newer is on unless set.",
    )

    @field_validator("grouping", mode="before")
    @classmethod
    def _whole_scrapes(cls, value: object) -> object:
        """/federate answers whole scrapes in order: a grouping given in the file keeps close_on_newer on."""
        if isinstance(value, dict) and "close_on_newer" not in value:
            return {**value, "close_on_newer": True}
        return value

    @model_validator(mode="after")
    def _check(self) -> FederationConfig:
        if self.bearer_token_file is not None and self.bearer_token_env is not None:
            raise ValueError("bearer_token_file or bearer_token_env, not both")
        if not self.derive_match and not self.match:
            raise ValueError("derive_match is off and no match[] selectors are given")
        return self

    @property
    def federate_url(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/federate") else base + "/federate"

    def selectors(self, catalog: Catalog) -> list[str]:
        """The derived selectors (:func:`match_selectors`), then `match`."""
        out: list[str] = []
        if self.derive_match:
            out = match_selectors(
                catalog,
                self.sources,
                jobs=self.grouping.sources,
                by_job=self.by_job,
                job_label=self.grouping.source_label,
                matchers=self.matchers,
            )
        return out + [m for m in self.match if m not in out]


# -- pulling ------------------------------------------------------------------------------------------------


class FederationError(PullError):
    """A pull that brought nothing (the message says why: connection, status, size, content type)."""


def display_url(url: str) -> str:
    """`url` without credentials or query (for messages and logs)."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class FederationPuller:
    """``/federate`` -> snapshots, one pull per :meth:`pull_once` (pulls run one at a time)."""

    def __init__(
        self,
        config: FederationConfig,
        *,
        builder: SnapshotBuilder | None = None,
        catalog: Catalog | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.builder = builder or SnapshotBuilder(catalog)
        self.catalog = self.builder.catalog
        self.grouper = Grouper(config.grouping, self.catalog)
        self.selectors = config.selectors(self.catalog)
        self.parser = FederateParser(TextLimits(max_body_bytes=config.max_body_bytes, max_series=config.max_series))
        self.stats: dict[str, int] = {}
        self.last_error: str | None = None
        self._client = client
        self._own_client = client is None
        self._last: dict[Labels, int] = {}  # series -> timestamp of its sample in the latest pull
        self._lock = asyncio.Lock()

    @property
    def url(self) -> str:
        return display_url(self.config.federate_url)

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            cfg = self.config
            verify: ssl.SSLContext | bool = True
            if cfg.ca_file is not None:
                verify = ssl.create_default_context(cafile=str(cfg.ca_file))
            self._client = httpx.AsyncClient(
                timeout=cfg.timeout_s, verify=verify, trust_env=False, follow_redirects=False
            )
        return self._client

    def _token(self) -> str | None:
        cfg = self.config
        if cfg.bearer_token_env is not None:
            token = os.environ.get(cfg.bearer_token_env, "").strip()
            if not token:
                raise FederationError(f"bearer_token_env: ${cfg.bearer_token_env} is not set")
            return token
        if cfg.bearer_token_file is not None:
            try:
                with cfg.bearer_token_file.open("rb") as fh:
                    token = fh.read(_MAX_TOKEN_BYTES + 1)
            except OSError as exc:
                raise FederationError(f"bearer_token_file {cfg.bearer_token_file}: {exc.strerror}") from None
            if len(token) > _MAX_TOKEN_BYTES or not token.strip():
                raise FederationError(f"bearer_token_file {cfg.bearer_token_file}: empty or over 64 KiB")
            return token.decode("utf-8", "replace").strip()
        return None

    async def fetch(self) -> bytes:
        """The body of one ``GET /federate`` (at most ``max_body_bytes``); raises :class:`FederationError`."""
        cfg = self.config
        headers = {"Accept": ACCEPT, "Accept-Encoding": accept_encoding()}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        limit = cfg.max_body_bytes
        url = self.url
        try:
            async with asyncio.timeout(cfg.timeout_s):
                async with self._http().stream(
                    "GET", cfg.federate_url, headers=headers, params=[("match[]", s) for s in self.selectors]
                ) as resp:
                    if resp.status_code != 200:
                        snippet = b""
                        async for chunk in resp.aiter_bytes():
                            snippet += chunk
                            if len(snippet) >= 300:
                                break
                        text = snippet[:300].decode("utf-8", "replace").strip()
                        raise FederationError(f"HTTP {resp.status_code} from {url}" + (f": {text}" if text else ""))
                    media = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                    if media not in ("text/plain", ""):
                        raise FederationError(f"{url} answered {media!r}, not the text exposition format (text/plain)")
                    declared = resp.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > limit:  # compressed or not: it only grows
                        raise FederationError(
                            f"{url}: a body of {declared} bytes (max_body_bytes {limit}: {SHARD_HINT})"
                        )
                    # raw bytes, decoded here within the limit: httpx would inflate a whole chunk first
                    decoder = BoundedDecoder(resp.headers.get("content-encoding", ""), limit)
                    body = bytearray()
                    async for chunk in resp.aiter_raw():
                        body += decoder.feed(chunk)
                    decoder.finish()
                    return bytes(body)
        except DecodeRefused as exc:
            raise FederationError(f"{url}: {exc}; {SHARD_HINT}") from None
        except TimeoutError:
            raise FederationError(f"{url}: no complete answer within {cfg.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise FederationError(f"{url}: {type(exc).__name__}: {str(exc)[:200] or 'failed'}") from None
        except OSError as exc:
            raise FederationError(f"{url}: {exc}") from None

    async def pull_once(self, now: float | None = None) -> Emitted:
        """One pull: the snapshots of the scrapes that are new since the last pull, and the rejects (a failed
        pull: one ``federate_failed``). `now`: unix seconds of the pull (the timestamp of lines without one)."""
        async with self._lock:
            now = time.time() if now is None else now
            self._count("pulls")
            try:
                body = await self.fetch()
                self._count("bytes", len(body))
                if len(body) > _THREAD_BODY:
                    result = await asyncio.to_thread(self.ingest, body, now)
                else:
                    result = self.ingest(body, now)
            except (FederationError, FederateTextError) as exc:
                return self._failed(str(exc))
            except Exception as exc:  # a pull must never stop the caller's loop
                log.exception("federation pull from %s failed", self.url)
                return self._failed(f"{type(exc).__name__}: {str(exc)[:300]}")
            self.last_error = None
            return result

    def _failed(self, reason: str) -> Emitted:
        self._count("pulls_failed")
        self.last_error = reason
        log.warning("federation pull failed: %s", reason)
        return Emitted([], [Reject("federate_failed", reason, "fetch")])

    def ingest(self, body: bytes | str, now: float) -> Emitted:
        """A ``/federate`` body -> the snapshots of the scrapes new since the last body, and the rejects (raises
        :class:`FederateTextError` for a body over the limits)."""
        parsed = self.parser.parse(body, int(now * 1000))
        self._count("series", len(parsed.series))
        rejects = [
            Reject(
                p.reason,
                f"/federate line left out ({p.reason})",
                "parse",
                p.count,
                payload=p.example.encode("utf-8", "replace"),
            )
            for p in parsed.problems
        ]
        if parsed.problems:
            self._count("malformed_lines", sum(p.count for p in parsed.problems))
        last, seen = self._last, {}
        fresh = []
        for s in parsed.series:
            ts = s.samples[0][0]
            prev = last.get(s.labels)
            seen[s.labels] = ts if prev is None or ts > prev else prev
            if prev is not None and ts <= prev:
                continue
            fresh.append(s)
        self._last = seen  # the series of this pull only: memory follows the body
        if len(parsed.series) > len(fresh):
            self._count("unchanged", len(parsed.series) - len(fresh))
        grouper = self.grouper
        grouper.add_metadata(parsed.metadata)
        for r in grouper.add(fresh, now):
            labels = ("{" + ",".join(f'{k}="{v}"' for k, v in r.example) + "}").encode("utf-8", "replace")
            rejects.append(Reject(r.kind, r.reason, "series", r.count, payload=labels))
        snapshots, more = self._build(grouper.drain())
        # one pull holds every target's latest scrape, taken at different moments: hand them out in event-time
        # order (as scrapes arrive from agents), not in the /federate answer's name order
        snapshots.sort(key=lambda s: s.ts)
        return Emitted(snapshots, rejects + more)

    def _record(self, rec: ScrapeRecord) -> ScrapeRecord:
        """Deltas span at least one pull: the interval of a source whose scrapes come faster is the pull's."""
        pull = self.config.interval_s
        if rec.interval_s is not None and rec.interval_s < pull and rec.job not in self.config.grouping.interval_s:
            if isinstance(rec, GroupedRecord):
                return rec.with_header(interval_s=pull)
            return rec.model_copy(update={"interval_s": pull})
        return rec

    def _build(self, items: list[ScrapeRecord | Forget]) -> tuple[list[Snapshot], list[Reject]]:
        """As :class:`~tailhound.ingest.receiver.RemoteWriteIngest` builds: one bad scrape is a reject."""
        snapshots, rejects = build_snapshots(self.builder, items, self._record)
        self._count("snapshots", len(snapshots))
        return snapshots, rejects

    async def close(self) -> None:
        """Close the HTTP client (when the puller made it)."""
        if self._own_client and self._client is not None:
            await self._client.aclose()
        self._client = None
