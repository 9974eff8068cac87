"""The console's silences page: the silences as the API lists them, with expire buttons, and a form that
previews and creates one (the browser calls the notifier's API; :data:`~.assets.SILENCES_SCRIPT`).
"""

from __future__ import annotations

from tailhound.notifier.webconsole.assets import SILENCES_SCRIPT
from tailhound.notifier.webconsole.formatting import badge, format_span, format_time, safe_text
from tailhound.notifier.webconsole.pages import layout


def silences_page(
    silences: list[dict], now: float, *, base: str = "/console", api: str = "", prefill: list[str] | None = None
) -> str:
    """The silences as the API lists them (expire buttons on active and pending CLI/API silences) and a form
    that previews and creates one (hooks ``silence-form``, ``silence-matchers``, ``silence-duration``,
    ``silence-author``, ``silence-comment``, ``silence-token``, ``silence-preview-button``, ``silence-create-button``,
    ``silence-preview``, ``silence-error``, ``silence-status``, ``silence-table``, ``silence-row``,
    ``silence-expire``). `api` is the API's base URL (empty: the page's own origin); `prefill` fills the
    matchers box (e.g. from ``?matcher=`` of the incident page's "Silence this incident" link)."""
    matchers = "\n".join(prefill or [])
    form = (
        f'<section class="card"><h2>New silence</h2>'
        f'<form class="form-grid" data-testid="silence-form" data-api="{safe_text(api)}" autocomplete="off">'
        '<label for="silence-matchers">Matchers</label>'
        '<textarea id="silence-matchers" name="matchers" rows="4" required data-testid="silence-matchers" '
        f'placeholder="node=&quot;gpu-node-2&quot;">{safe_text(matchers)}</textarea>'
        '<span class="hint muted small">One per line, as Alertmanager writes them: <code>node="gpu-node-2"</code>, '
        '<code>root_cause=~"gpu-.*"</code>, <code>severity!="info"</code>. An incident is silenced when every '
        "matcher matches.</span>"
        '<label for="silence-duration">Duration</label><input id="silence-duration" name="duration" value="2h" '
        'required size="8" data-testid="silence-duration">'
        '<label for="silence-author">Author</label><input id="silence-author" name="author" required '
        'data-testid="silence-author">'
        '<label for="silence-comment">Comment</label><input id="silence-comment" name="comment" required '
        'data-testid="silence-comment" placeholder="why, and a ticket">'
        '<label for="silence-token">API token</label><input id="silence-token" name="token" type="password" '
        'data-testid="silence-token" placeholder="optional">'
        '<span class="hint muted small">Sent as <code>Authorization: Bearer</code> with each call; kept in this '
        "browser tab only (sessionStorage).</span>"
        '<span></span><div class="actions-row">'
        '<button type="button" data-testid="silence-preview-button">Preview</button>'
        '<button type="submit" class="primary" data-testid="silence-create-button">Create</button></div></form>'
        '<noscript><p class="notice">Creating and expiring silences needs JavaScript here; '
        "<code>tailhound silence add</code> does it from a terminal.</p></noscript>"
        '<div class="error" role="alert" data-testid="silence-error" hidden></div>'
        '<div class="notice" role="status" data-testid="silence-status" hidden></div>'
        '<div class="preview" data-testid="silence-preview" aria-live="polite" hidden></div></section>'
    )
    order = {"active": 0, "pending": 1}
    ordered = sorted(silences, key=lambda s: (order.get(str(s.get("state")), 2), _number(s.get("starts_at")) or 0))
    rows = "".join(_silence_row(s, now) for s in ordered) or (
        '<tr><td colspan="8" class="muted">No silences.</td></tr>'
    )
    table = (
        '<h2>Silences</h2><table data-testid="silence-table"><thead><tr><th>State</th><th>Matchers</th>'
        "<th>Starts</th><th>Ends</th><th>Author</th><th>Comment</th><th>Created</th><th></th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
    return layout(
        "Silences",
        "<h1>Silences</h1>" + form + table,
        now=now,
        live=True,
        base=base,
        current="silences",
        script=SILENCES_SCRIPT,
    )


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _silence_row(s: dict, now: float) -> str:
    sid, state, source = str(s.get("id", "")), str(s.get("state", "")), str(s.get("source", "cli"))
    matchers = s.get("matchers") if isinstance(s.get("matchers"), list) else []
    ends = _number(s.get("ends_at"))
    left = f' <span class="muted small">(in {format_span(ends - now)})</span>' if ends and state != "expired" else ""
    if state in ("active", "pending") and source == "cli":
        action = (
            f'<button type="button" class="danger" data-testid="silence-expire" data-silence="{safe_text(sid)}">'
            "Expire</button>"
        )
    elif source != "cli":
        action = badge("kind-tag", "config") + ' <span class="muted small">maintenance window</span>'
    else:
        action = ""
    return (
        f'<tr data-testid="silence-row" data-silence="{safe_text(sid)}" data-state="{safe_text(state)}">'
        f"<td>{badge('state-' + state, state)}</td>"
        f'<td class="matchers">{"<br>".join(f"<code>{safe_text(m)}</code>" for m in matchers)}</td>'
        f'<td class="nowrap small">{format_time(_number(s.get("starts_at")))}</td>'
        f'<td class="nowrap small">{format_time(ends)}{left}</td><td>{safe_text(s.get("author", ""))}</td>'
        f"<td>{safe_text(s.get('comment', ''))}</td>"
        f'<td class="nowrap small">{format_time(_number(s.get("created_at")))}</td><td>{action}</td></tr>'
    )
