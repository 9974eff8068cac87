"""Bounds on what users can make the notifier hold and match, whatever the path (HTTP API, CLI, state topic).

A silence is matched against every incident the notifier is about to notify, inside the worker's event
loop, next to stream processing; its comment is kept in memory and on the state topic. So how many
silences there are, how many matchers each has and how much text they carry is bounded here, and with
RE2 (:mod:`tailhound.notifier.matchers`, linear time, a memory budget per expression) the work of
matching one incident is bounded too: at most ``MAX_SILENCES x MAX_MATCHERS`` RE2 matches of a label value,
of at most ``MAX_SILENCES x MAX_PROGRAM_SIZE`` RE2 instructions, whose compiled memory is bounded as well.
"""

from __future__ import annotations

#: silences that are active or pending (not expired) at once; the API answers 409 beyond
MAX_SILENCES = 1000
#: expired silences kept for listing (the oldest are forgotten first, or after SILENCE_RETENTION_S)
MAX_EXPIRED_SILENCES = 1000
#: matchers in one silence (Alertmanager has no limit; real silences use a handful). Matching one incident
#: against MAX_SILENCES hostile silences of this many matchers costs 0.125 s (16) to 0.2-0.36 s (32), all of
#: it while the event loop waits: 32 let one group stall it 1.3 s in a loaded CI run (tests/faults)
MAX_MATCHERS = 16
#: characters of all matcher values of one silence together (one value alone: matchers.MAX_VALUE_CHARS)
MAX_MATCHER_CHARS = 4096
#: RE2 instructions of all regex matchers of one silence together: what matching it costs and the memory its
#: compiled expressions hold (~22 bytes an instruction). ``node=~"gpu-node-(7|8)"`` is 14; 16 such are 224
MAX_PROGRAM_SIZE = 1024
#: bytes (UTF-8) of a silence's ``author`` and of its ``comment``
MAX_TEXT_BYTES = 1024
#: longest silence (ends_at - starts_at), and how far ahead one may start
MAX_SILENCE_DURATION_S = 30 * 86400.0
#: largest HTTP request body the API reads (a silence with 32 long matchers fits many times over)
MAX_BODY_BYTES = 64 * 1024
#: silence records taken from the state topic per notifier tick (each is validated, its patterns compiled)
STATE_RECORDS_PER_TICK = 50
#: the flush stage hands the event loop back after this much work, then goes on with the remaining groups
FLUSH_SLICE_S = 0.02

# --- what the incident console keeps and serves (notifier/history.py, notifier/webconsole/) -----------------------
#: notification records kept per group and receiver (DeliveryLog.history); the oldest are dropped first
MAX_DELIVERY_HISTORY = 20
#: lifecycle marks kept per incident (GroupState.marks): the first one and the newest
MAX_MARKS_PER_INCIDENT = 32
#: chart values (points x (1 + entities + baselines), all series) the incidents of one group keep together. An
#: incident whose series would pass it is kept without them, so a group's record stays far below a broker's
#: 1 MB message limit (a full series set of one incident is at most ~16,000 values, ~130 kB of JSON)
MAX_GROUP_SERIES_VALUES = 24_000
#: resolved groups kept as history for the console once the pipeline forgets them (Notifier.recent), and how
#: long; the oldest go first (a tombstone on the state topic)
MAX_RECENT_GROUPS = 500
RECENT_RETENTION_S = 7 * 86400.0
#: incidents one GET /api/v1/incidents answers at most (``limit``), and by default
MAX_INCIDENTS_LISTED = 500
DEFAULT_INCIDENTS_LISTED = 100
#: incidents the console's index page shows (open ones first, then the newest resolved)
MAX_CONSOLE_INCIDENTS = 200
#: matches a silence preview reports (with the total count)
MAX_PREVIEW_MATCHES = 100
#: body of the console's login form, and how long the session cookie it sets is good for
MAX_LOGIN_BODY_BYTES = 4096
CONSOLE_SESSION_S = 12 * 3600.0


def text_within(value: str, what: str) -> str:
    """`value` unless its UTF-8 form is longer than MAX_TEXT_BYTES (pydantic AfterValidator)."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"{what} has {size} bytes, more than {MAX_TEXT_BYTES}")
    return value
