"""The console's HTML pages (pure: views in, one ``<!doctype html>`` string out): the incident list and the
incident page, and the :func:`layout` every page shares: a complete document with its CSS and script inline,
nothing fetched, so the same markup serves the live console and the offline replay report (:mod:`.report`).

``live`` pages link to ``{base}/incidents/{id}`` and offer to silence an incident; the report links to
``#<id>`` anchors in its own file. Everything from outside is escaped. Tests find elements by ``data-testid``.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

from tailhound.incident import IncidentEvent, RuleFinding
from tailhound.notifier.webconsole.assets import FILTER_SCRIPT, STYLE
from tailhound.notifier.webconsole.charts import peer_svg, timeline_svg
from tailhound.notifier.webconsole.formatting import badge, format_span, format_time, format_value, safe_text
from tailhound.notifier.webconsole.view import IncidentView
from tailhound.vocabulary import ROOT_CAUSES, Severity

BRAND = "tailhound incident console"
#: the charts' width on the incident page (CSS shrinks them to narrower screens)
CHART_WIDTH = 960
_CODE = re.compile(r"`([^`]+)`")


def index_page(views: list[IncidentView], now: float, *, live: bool, base: str = "/console") -> str:
    """Open and recent incidents in one filterable table."""
    return layout(
        "Incidents",
        incident_list(views, now, live=live, base=base),
        now=now,
        live=live,
        base=base,
        current="incidents",
        script=FILTER_SCRIPT,
    )


def incident_page(view: IncidentView, now: float, *, live: bool, base: str = "/console") -> str:
    """One incident: what, where and since when, its evidence and charts, what to do, what was notified."""
    body = ""
    if live:
        body += f'<p class="small"><a href="{safe_text(base or "/")}">&larr; all incidents</a></p>'
    body += incident_detail(view, now, live=live, base=base, heading=1)
    return layout(cause_title(view), body, now=now, live=live, base=base, current="incidents")


# --- building blocks (the report uses them too) --------------------------------------------------------------------
def layout(
    title: str, body: str, *, now: float, live: bool, base: str = "/console", current: str = "", script: str = ""
) -> str:
    """A complete page: doctype, inline style, the console's header (with navigation when `live`), `body`
    (already HTML) and an inline `script`."""
    nav = ""
    if live:
        links = [
            ("incidents", base or "/", "Incidents"),
            ("silences", f"{base}/silences", "Silences"),
            ("capacity", f"{base}/capacity", "Capacity"),
        ]
        nav = (
            "<nav>"
            + "".join(
                f'<a href="{safe_text(href)}"{" aria-current=page" if key == current else ""}>{label}</a>'
                for key, href, label in links
            )
            + "</nav>"
        )
    script_tag = f"<script>{script}</script>" if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{safe_text(title)} · tailhound</title><style>{STYLE}</style></head><body>"
        f'<header class="top"><span class="brand">{BRAND}</span>{nav}'
        f'<span class="clock">as of {format_time(now)}</span></header>'
        f"<main>{body}</main>{script_tag}</body></html>"
    )


def cause_title(view: IncidentView) -> str:
    info = ROOT_CAUSES.get(view.event.root_cause)
    return info.title if info else str(view.event.root_cause)


def incident_href(view: IncidentView, *, live: bool, base: str) -> str:
    iid = quote(view.incident_id, safe="")
    return f"{base}/incidents/{iid}" if live else f"#{iid}"


def incident_list(views: list[IncidentView], now: float, *, live: bool, base: str = "/console") -> str:
    """The incident table with its filters (a ``<section id="incidents">``): open ones first, newest first."""
    ordered = sorted(views, key=lambda v: (not v.open, -_ended(v) if not v.open else -v.event.opened_at))
    causes = sorted({str(v.event.root_cause) for v in views})
    cause_options = "".join(
        f'<option value="{safe_text(c)}">{safe_text(ROOT_CAUSES[c].title if c in ROOT_CAUSES else c)}</option>'
        for c in causes
    )
    severity_options = "".join(f'<option value="{s}">{s}</option>' for s in reversed(Severity))
    n_open = sum(1 for v in views if v.open)
    filters = (
        '<form class="filters" role="search" data-testid="incident-filters">'
        '<input type="search" name="q" placeholder="Filter by node, model, summary…" aria-label="Filter incidents" '
        'data-testid="filter-text">'
        '<label>State <select name="state" data-testid="filter-state"><option value="all">all</option>'
        '<option value="open">open</option><option value="resolved">resolved</option></select></label>'
        f'<label>Cause <select name="cause" data-testid="filter-cause"><option value="">all causes</option>'
        f"{cause_options}</select></label>"
        f'<label>Severity <select name="severity" data-testid="filter-severity"><option value="">all</option>'
        f"{severity_options}</select></label></form>"
    )
    rows = "".join(_incident_row(v, now, live=live, base=base) for v in ordered) or (
        '<tr><td colspan="7" class="muted">No incidents.</td></tr>'
    )
    return (
        f'<section id="incidents"><h1>Incidents</h1><p class="muted"><span data-testid="incident-count">'
        f"{len(views)} incidents</span> · {n_open} open</p>{filters}"
        '<table data-testid="incident-table"><thead><tr><th>Cause</th><th>Severity</th><th>Scope</th>'
        "<th>Age</th><th>Kind</th><th>State</th><th>Opened</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def incident_detail(view: IncidentView, now: float, *, live: bool, base: str = "/console", heading: int = 1) -> str:
    """One incident as an ``<article id="<incident id>">``; `heading` is the level of its title (1 on its own
    page, 2 in the report)."""
    ev = view.event
    h, sub = f"h{heading}", f"h{heading + 1}"
    state = "open" if view.open else "resolved"
    facts = [("Scope", safe_text(ev.scope.describe())), ("Opened", format_time(ev.opened_at))]
    if ev.resolved_at is not None:
        facts += [("Resolved", format_time(ev.resolved_at)), ("Duration", format_span(view.age_s(now)))]
    else:
        facts.append(("Open for", format_span(view.age_s(now))))
    facts += [
        ("Incident", f"<code>{safe_text(ev.incident_id)}</code> · event #{ev.sequence} ({safe_text(ev.event)})"),
        (
            "Rule",
            f"<code>{safe_text(ev.rule)}</code>"
            + (f' <span class="muted small">{safe_text(ev.rule_origin)}</span>' if ev.rule_origin else ""),
        ),
        ("Rules version", f"<code>{safe_text(ev.rules_version)}</code>" if ev.rules_version else "—"),
    ]
    if view.group_id:
        facts.append(("Notification group", f"<code>{safe_text(view.group_id)}</code>"))
    if ev.labels:
        facts.append(
            ("Labels", " ".join(f"<code>{safe_text(k)}={safe_text(v)}</code>" for k, v in sorted(ev.labels.items())))
        )
    silence = ""
    if live:
        href = f"{base}/silences?" + urlencode([("matcher", m) for m in silence_matchers(view)])
        silence = (
            f'<p><a class="button silence" data-testid="silence-incident" href="{safe_text(href)}">'
            "Silence this incident</a></p>"
        )
    head = (
        f'<header class="incident-head"><{h}>{safe_text(cause_title(view))}</{h}><div class="badges">'
        f"{badge('sev-' + ev.severity, ev.severity)}{badge('state-' + state, state)}"
        f"{badge('kind-tag', 'transient' if ev.transient else 'persistent')}</div>"
        f'<p class="summary">{safe_text(ev.summary)}</p><dl class="facts">'
        + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
        + f"</dl>{silence}</header>"
    )
    evidence = "".join(f"<li><code>{safe_text(e.describe())}</code></li>" for e in ev.evidence)
    parts = [
        head,
        f"<{sub}>Evidence</{sub}>",
        f'<ul data-testid="evidence">{evidence}</ul>' if evidence else '<p class="muted">No evidence.</p>',
        f"<{sub}>Differential diagnosis</{sub}>",
        _diagnosis(ev),
        f"<{sub}>Charts</{sub}>",
        _charts(view),
    ]
    actions = "".join(f"<li>{_code_spans(a)}</li>" for a in ev.actions)
    parts += [
        f"<{sub}>Suggested actions</{sub}>",
        f'<ol data-testid="actions">{actions}</ol>' if actions else '<p class="muted">None.</p>',
    ]
    parts += [f"<{sub}>Notifications</{sub}>", _notifications(view, live=live)]
    return (
        f'<article class="incident" id="{safe_text(ev.incident_id)}" data-testid="incident" '
        f'data-incident="{safe_text(ev.incident_id)}">' + "".join(parts) + "</article>"
    )


def _diagnosis(ev: IncidentEvent) -> str:
    """Why this cause and not another: the look-alike the signals cannot rule out with the check that does,
    and the ranked candidates with the rules for and against each (``tailhound explain`` in words)."""
    out = ""
    if ev.differential is not None:
        d = ev.differential
        out += (
            f'<p class="notice" data-testid="differential"><strong>Not certain: {safe_text(str(d.lead))} or '
            f"{safe_text(str(d.runner_up))}.</strong> {safe_text(d.why)}<br><strong>Tell them apart:</strong> "
            f"{safe_text(d.check)}</p>"
        )
    if not ev.candidates:
        return out + (
            '<p class="muted">No candidates on this event (they are recorded while the incident is '
            f"open: <code>tailhound explain {safe_text(ev.incident_id)}</code>).</p>"
        )
    rows = []
    for k, c in enumerate(ev.candidates, 1):
        missed = ", ".join(f"<code>{safe_text(n)}</code>" for n in c.unexplained) or "—"
        rows.append(
            f'<tr data-testid="candidate"><td>{k}</td><td>{safe_text(str(c.root_cause))}</td>'
            f'<td class="nowrap">{c.score:.2f}</td><td class="small"><ul>{_findings(c.supports)}</ul></td>'
            f'<td class="small"><ul>{_findings(c.against)}</ul></td><td class="small">{missed}</td></tr>'
        )
    return (
        out + '<table data-testid="candidates"><thead><tr><th>#</th><th>Cause</th><th>Score</th>'
        "<th>For (firing, pending)</th><th>Against (quiet)</th><th>Does not explain</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _findings(items: list[RuleFinding]) -> str:
    return "".join(f"<li><code>{safe_text(f.describe())}</code></li>" for f in items)


def silence_matchers(view: IncidentView) -> list[str]:
    """Matchers that silence this incident and its recurrences: its node and model (or endpoint, or else its
    rule) and its root cause, in the silences' syntax (``node="gpu-node-2"``)."""
    ev = view.event
    pairs = [(k, v) for k, v in (("node", ev.scope.node), ("model", ev.scope.model)) if v]
    if not pairs:
        pairs = [("endpoint", ev.scope.endpoint)] if ev.scope.endpoint else [("rule", ev.rule)]
    pairs.append(("root_cause", str(ev.root_cause)))
    return [f'{k}="{_quoted(v)}"' for k, v in pairs]


# --- internals -----------------------------------------------------------------------------------------------------
def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _code_spans(text: str) -> str:
    """`text` escaped, with `backquoted` spans as code (the rules write commands that way)."""
    return _CODE.sub(r"<code>\1</code>", safe_text(text))


def _ended(view: IncidentView) -> float:
    ev = view.event
    return ev.resolved_at if ev.resolved_at is not None else ev.ts


def _incident_row(view: IncidentView, now: float, *, live: bool, base: str) -> str:
    ev = view.event
    state = "open" if view.open else "resolved"
    return (
        f'<tr data-testid="incident-row" data-incident="{safe_text(ev.incident_id)}" data-state="{state}" '
        f'data-cause="{safe_text(ev.root_cause)}" data-severity="{safe_text(ev.severity)}">'
        f'<td><a href="{safe_text(incident_href(view, live=live, base=base))}">{safe_text(cause_title(view))}</a>'
        f'<div class="muted small">{safe_text(ev.summary)}</div></td>'
        f"<td>{badge('sev-' + ev.severity, ev.severity)}</td><td>{safe_text(ev.scope.describe())}</td>"
        f'<td class="nowrap">{format_span(view.age_s(now))}</td>'
        f"<td>{'transient' if ev.transient else 'persistent'}</td><td>{badge('state-' + state, state)}</td>"
        f'<td class="nowrap small">{format_time(ev.opened_at)}</td></tr>'
    )


def _charts(view: IncidentView) -> str:
    if not view.event.series:
        return '<p class="muted">No chart data was recorded for this incident.</p>'
    out = []
    for s in view.event.series:
        ref = f", threshold {s.op} {format_value(s.threshold, s.unit)}" if s.threshold is not None else ""
        held = f", for {format_span(s.for_s)}" if s.for_s else ""
        peers = s.peers()
        out.append(
            f'<figure class="series" data-testid="series" data-signal="{safe_text(s.signal)}">'
            f'<figcaption><code>{safe_text(s.signal)}</code> <span class="muted small">rule '
            f"{safe_text(s.rule)}{safe_text(ref)}{safe_text(held)}</span></figcaption>"
            + timeline_svg(s, view.marks, width=CHART_WIDTH)
            + (
                f'<p class="muted small">Against {len(peers)} peers:</p>' + peer_svg(s, width=CHART_WIDTH)
                if peers
                else ""
            )
            + "</figure>"
        )
    return "".join(out)


def _notifications(view: IncidentView, *, live: bool) -> str:
    out = ""
    if view.suppressed:
        out += f'<p class="notice" data-testid="suppressed">Held back: {safe_text(view.suppressed)}</p>'
    if not view.deliveries:
        what = "No notifications recorded." if live else "A replay sends no notifications."
        return out + f'<p class="muted">{what}</p>'
    rows = "".join(
        f'<tr data-testid="notification-row" data-receiver="{safe_text(d.receiver)}" '
        f'data-outcome="{safe_text(d.outcome)}"><td>{safe_text(d.receiver)}</td><td>{safe_text(d.kind)}'
        f"{' ' + badge('kind-tag', 'flapping') if d.flapping else ''}</td><td>#{d.sequence}</td>"
        f'<td class="nowrap small">{format_time(d.created_at)}</td><td class="nowrap small">{format_time(d.at)}</td>'
        f"<td>{badge('outcome-' + d.outcome, d.outcome)}</td><td>{d.attempts}</td>"
        f'<td class="small">{safe_text(d.error or "")}</td></tr>'
        for d in view.deliveries
    )
    return (
        out + '<table data-testid="notifications"><thead><tr><th>Receiver</th><th>Kind</th><th>Sequence</th>'
        "<th>Created</th><th>Delivered</th><th>Outcome</th><th>Attempts</th><th>Error</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
