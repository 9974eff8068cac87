"""The remote-write 1.0 request as Python values: its messages, what one may hold, and how a bad one is refused.

A request body (:mod:`tailhound.ingest.remote_write`) is the snappy *block* format (no framing) of::

    message WriteRequest  { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    message TimeSeries    { repeated Label labels = 1; repeated Sample samples = 2;
                            repeated Exemplar exemplars = 3; repeated Histogram histograms = 4; }
    message Label         { string name = 1; string value = 2; }
    message Sample        { double value = 1; int64 timestamp = 2; }   // timestamp: unix milliseconds
    message MetricMetadata { MetricType type = 1; string metric_family_name = 2; string help = 4; string unit = 5; }

:class:`WriteRequest`, :class:`Series` (a TimeSeries) and :class:`Metadata` (a MetricMetadata) are what it
decodes to; exemplars and native histograms are left out (counted in :attr:`WriteRequest.skipped`).

Prometheus marks the end of a series (a target gone, a series no longer exposed, a failed scrape) with a
*stale marker*: the NaN whose bits are ``0x7ff0000000000002``. It is not a value: it is filed under
:attr:`Series.stale`, never under :attr:`Series.samples`; an ordinary NaN stays a value (:func:`is_stale`).

Anything malformed raises :class:`RemoteWriteError` with a reason code (``truncated``, ``bad_snappy``,
``too_many_series`` ...) and the HTTP status a receiver answers (400, or 413 for what is too large, over
:class:`DecodeLimits`): the payload is permanently bad, Prometheus must not send it again.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from tailhound.errors import MalformedMessage

#: The bits of Prometheus' stale marker (value.StaleNaN), and the marker as the 8 bytes a Sample carries.
STALE_NAN_BITS = 0x7FF0000000000002
_STALE_BYTES = struct.pack("<Q", STALE_NAN_BITS)
#: The stale marker as a float (a NaN; compare bits with :func:`is_stale`, never values).
STALE_NAN: float = struct.unpack("<d", _STALE_BYTES)[0]

#: MetricMetadata.MetricType -> the exposition TYPE it stands for.
METRIC_TYPES = ("unknown", "counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset")

_DOUBLE = struct.Struct("<d")
_MASK64 = (1 << 64) - 1


def is_stale(value: float) -> bool:
    """True for Prometheus' stale marker (a NaN with a particular payload), False for any other value."""
    return value != value and struct.pack("<d", value) == _STALE_BYTES


class RemoteWriteError(MalformedMessage, ValueError):
    """A request body that is not a valid remote-write 1.0 request (or over a limit): why, in a countable
    ``reason``, and the HTTP ``status`` to answer (400, 413 for a body or a message too large)."""

    def __init__(self, reason: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


@dataclass(frozen=True)
class DecodeLimits:
    """What one request may hold; over a limit the request is refused whole (400/413: Prometheus drops it).

    Far above what Prometheus sends (``queue_config.max_samples_per_send``: 500 in 2.x before 2.45, 2000
    since; a batch of a few hundred series is 10-40 KB compressed). The per-label limits are those of the
    agent's exposition parser (:class:`tailhound.agents.exposition_lines.Limits`); the tighter snapshot limits
    (label name 256 characters, metric name 200) drop single series later (:mod:`tailhound.ingest.grouping`).
    """

    max_body_bytes: int = 8 << 20  # compressed request body
    max_decoded_bytes: int = 64 << 20  # the snappy preamble's length, checked before decompressing
    max_series: int = 100_000  # TimeSeries in one request
    max_samples: int = 500_000  # samples (stale markers included) in one request
    max_samples_per_series: int = 10_000
    max_labels: int = 64  # labels of one series, __name__ included
    max_label_name: int = 1024  # bytes (UTF-8)
    max_label_value: int = 4096  # bytes (UTF-8)
    max_metadata: int = 100_000  # MetricMetadata entries in one request
    max_metadata_text: int = 16384  # bytes of one help or unit text


DEFAULT_DECODE_LIMITS = DecodeLimits()

Labels = tuple[tuple[str, str], ...]


class Series(NamedTuple):
    """One TimeSeries: its labels in the order sent (Prometheus sorts them by name), its samples as
    (timestamp in unix ms, value) and the timestamps of its stale markers."""

    labels: Labels
    samples: tuple[tuple[int, float], ...] = ()
    stale: tuple[int, ...] = ()

    @property
    def name(self) -> str | None:
        for k, v in self.labels:
            if k == "__name__":
                return v
        return None


class Metadata(NamedTuple):
    """One MetricMetadata: the TYPE (``counter``, ``gauge`` ... see :data:`METRIC_TYPES`) of a metric family."""

    family: str
    type: str = "unknown"
    help: str = ""
    unit: str = ""


class WriteRequest(NamedTuple):
    series: list[Series]
    metadata: list[Metadata]
    #: what was left out on purpose, by kind: ``native_histograms`` (series' histogram samples), ``exemplars``
    skipped: dict[str, int]

    @property
    def sample_count(self) -> int:
        return sum(len(s.samples) for s in self.series)
