"""dcgm-exporter's counters files: which DCGM fields an exporter with its defaults exports, and the exact
line that turns on one it does not.

dcgm-exporter reads its fields from a CSV file (``-f`` / ``DCGM_EXPORTER_COLLECTORS``, default
``/etc/dcgm-exporter/default-counters.csv``), one field a line::

    DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
    # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.

A line starting with ``#`` is off. ``dcgm-default-counters.csv`` is the exporter's own default file;
``dcgm-extra-counters.csv`` holds the lines of the fields the catalog maps that the default file lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

#: The flag and environment variable that name dcgm-exporter's counters file, and its default.
COUNTERS_FILE_OPTION = "-f / DCGM_EXPORTER_COLLECTORS"
DEFAULT_COUNTERS_PATH = "/etc/dcgm-exporter/default-counters.csv"
METRIC_KINDS = ("gauge", "counter")


@dataclass(frozen=True)
class DcgmCounter:
    field: str
    kind: str
    help: str
    #: the line is on (not commented out) in the file it came from
    enabled: bool

    @property
    def line(self) -> str:
        """The line to put in dcgm-exporter's counters file."""
        return f"{self.field}, {self.kind}, {self.help}"

    @property
    def profiling(self) -> bool:
        """A DCP profiling field (DCGM_FI_PROF_*): datacenter GPUs with DCGM's profiling module only."""
        return self.field.startswith("DCGM_FI_PROF_")


def parse_counters(text: str) -> dict[str, DcgmCounter]:
    """Field -> counter for every field line, on or commented out; other comments are skipped."""
    out: dict[str, DcgmCounter] = {}
    for raw in text.splitlines():
        line = raw.strip()
        enabled = not line.startswith("#")
        body = line.lstrip("#").strip()
        parts = [p.strip() for p in body.split(",", 2)]
        if len(parts) != 3 or not parts[0].startswith("DCGM_") or parts[1] not in (*METRIC_KINDS, "label"):
            continue
        field, kind, help_text = parts
        if field in out and out[field].enabled and not enabled:
            continue  # an enabled line wins over a commented-out one
        out[field] = DcgmCounter(field=field, kind=kind, help=help_text, enabled=enabled)
    return out


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@cache
def default_counters() -> dict[str, DcgmCounter]:
    """dcgm-exporter's default counters file (lines that are off included, ``enabled=False``)."""
    return parse_counters(_read("dcgm-default-counters.csv"))


@cache
def default_fields() -> frozenset[str]:
    """The metrics a dcgm-exporter with its default counters file exports (labels excluded)."""
    return frozenset(c.field for c in default_counters().values() if c.enabled and c.kind in METRIC_KINDS)


@cache
def known_counters() -> dict[str, DcgmCounter]:
    """Every field with a known counters-file line: the default file's, then the extra file's."""
    extra = parse_counters(_read("dcgm-extra-counters.csv"))
    return {**extra, **default_counters()}


def counter_line(field: str) -> str | None:
    """The exact counters-file line that turns `field` on, when known."""
    found = known_counters().get(field)
    return found.line if found is not None else None
