"""The offline replay report: one self-contained HTML file of a replay's incidents (``tailhound replay --html``).

The incident list at the top (its filters work from disk too: the script is inline) and every incident below
it, as on the console's incident page, each an ``<article id="<incident id>">`` the list links to. Nothing
is fetched (styles, scripts and SVG charts are inline), and there is no silences UI: there is no server to
talk to. Ages are as of `generated_at` -- for a replay, the end of the recording, so an incident still open
when the recording ends shows how long it had been open then, and the same recording gives the same file.
"""

from __future__ import annotations

from tailhound.notifier.webconsole.assets import FILTER_SCRIPT
from tailhound.notifier.webconsole.formatting import format_time, safe_text
from tailhound.notifier.webconsole.pages import incident_detail, incident_list, layout
from tailhound.notifier.webconsole.view import IncidentView


def render_report(views: list[IncidentView], *, title: str, generated_at: float) -> str:
    """The report of `views` (one per incident, in the order given) as one HTML document."""
    intro = (
        f'<p class="muted" data-testid="report-title">{safe_text(title)} · {len(views)} incidents · '
        f"times in UTC, ages as of {format_time(generated_at)}</p>"
    )
    index = incident_list(views, generated_at, live=False)
    details = "".join(
        incident_detail(v, generated_at, live=False, heading=2)
        + '<p class="small"><a href="#incidents">&uarr; back to the incident list</a></p>'
        for v in views
    )
    return layout(title, intro + index + details, now=generated_at, live=False, script=FILTER_SCRIPT)


def report_title(sources: list[str]) -> str:
    """``replay of fleet.jsonl`` (``fleet.jsonl and 2 more`` for several recordings)."""
    if not sources:
        return "replay"
    more = f" and {len(sources) - 1} more" if len(sources) > 1 else ""
    return f"replay of {sources[0]}{more}"
