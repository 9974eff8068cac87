"""The console's inline CSS and JavaScript (nothing is fetched: the pages work from a file on disk).

- :data:`STYLE`: one light theme, severity and state colours, tables, forms, charts;
- :data:`FILTER_SCRIPT`: the incident list's filters (text, state, cause, severity), client-side; without
  JavaScript every row stays listed;
- :data:`SILENCES_SCRIPT`: the silences page's preview, create and expire calls to the notifier's API
  (``fetch``; the API token typed into the form is kept in ``sessionStorage`` and sent as
  ``Authorization: Bearer``). What comes back is shown with ``textContent``, never parsed as HTML.

The scripts find their elements by ``data-testid`` (the same hooks the tests use) and read the API's base
URL from the form's ``data-api`` attribute, so no value is ever written into script text.
"""

from __future__ import annotations

STYLE = """
:root{--fg:#1f2328;--muted:#656d76;--border:#d0d7de;--bg:#fff;--subtle:#f6f8fa;--accent:#0969da;
--critical:#cf222e;--warning:#9a6700;--info:#0969da;--ok:#1a7f37}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);
background:var(--subtle)}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
header.top{display:flex;flex-wrap:wrap;align-items:baseline;gap:8px 24px;padding:10px 24px;background:#24292f;
color:#fff}
header.top .brand{font-weight:600;font-size:15px}
header.top nav a{color:#d0d7de;margin-right:16px}header.top nav a[aria-current=page]{color:#fff;font-weight:600}
header.top .clock{margin-left:auto;color:#afb8c1;font-size:12px}
main{max-width:1180px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:17px;margin:20px 0 8px}h3{font-size:15px;margin:16px 0 6px}
.card{background:var(--bg);border:1px solid var(--border);border-radius:6px;padding:12px 16px;margin:12px 0}
table{width:100%;border-collapse:collapse;background:var(--bg);border:1px solid var(--border)}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid var(--border);vertical-align:top}
th{background:var(--subtle);font-size:12px;text-transform:uppercase;letter-spacing:.03em;color:var(--muted)}
tbody tr:hover td{background:#f6f8fa}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:12px;font-weight:600;line-height:20px;
border:1px solid transparent;white-space:nowrap}
.sev-critical{background:#ffebe9;color:var(--critical);border-color:#ffcecb}
.sev-warning{background:#fff8c5;color:var(--warning);border-color:#eed888}
.sev-info{background:#ddf4ff;color:var(--info);border-color:#b6e3ff}
.state-open{background:#ffebe9;color:var(--critical)}.state-active{background:#ddf4ff;color:var(--info)}
.state-resolved,.outcome-delivered{background:#dafbe1;color:var(--ok)}
.state-pending,.outcome-pending,.outcome-retrying{background:#fff8c5;color:var(--warning)}
.state-expired,.kind-tag{background:#eaeef2;color:var(--muted)}
.outcome-gave-up{background:#ffebe9;color:var(--critical)}
.muted{color:var(--muted)}.small{font-size:12px}.nowrap{white-space:nowrap}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
td code{overflow-wrap:anywhere}td.matchers{min-width:240px}
.card h2{margin-top:4px}.form-grid input{max-width:520px;width:100%}
.filters{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;margin:8px 0 12px}
.filters label{color:var(--muted);font-size:13px}
input,select,textarea,button{font:inherit;color:inherit}
input,select,textarea{padding:4px 8px;border:1px solid var(--border);border-radius:6px;background:#fff}
input[type=search]{min-width:260px}textarea{width:100%;font-family:ui-monospace,Menlo,Consolas,monospace}
button,a.button{display:inline-block;padding:4px 12px;border:1px solid var(--border);border-radius:6px;
background:var(--subtle);cursor:pointer;font-weight:500}
button.primary{background:#1f883d;color:#fff;border-color:#1a7f37}button.danger{color:var(--critical)}
button:disabled{opacity:.6;cursor:default}
a.button.silence{color:var(--fg)}a.button.silence:hover{text-decoration:none;background:#eaeef2}
.form-grid{display:grid;grid-template-columns:max-content 1fr;gap:8px 12px;align-items:center}
.form-grid .hint{grid-column:2;margin-top:-6px}
.actions-row{display:flex;gap:8px;margin-top:12px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px 0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
.incident{background:var(--bg);border:1px solid var(--border);border-radius:6px;padding:4px 20px 16px;
margin:16px 0}
.incident-head .badges{display:flex;gap:6px;flex-wrap:wrap}
.summary{font-size:15px;margin:6px 0}
figure.series{margin:12px 0}figure.series figcaption{font-weight:600}
svg.chart{max-width:100%;height:auto;display:block;margin:6px 0;border:1px solid var(--border);border-radius:6px}
.error{color:var(--critical);background:#ffebe9;border:1px solid #ffcecb;border-radius:6px;padding:6px 10px;
margin:8px 0}
.notice{background:#ddf4ff;border:1px solid #b6e3ff;border-radius:6px;padding:6px 10px;margin:8px 0}
.preview{margin:8px 0}.preview ul{margin:4px 0;padding-left:20px}
[hidden]{display:none!important}
"""

FILTER_SCRIPT = """
(() => {
  const form = document.querySelector('[data-testid="incident-filters"]');
  if (!form) return;
  const rows = Array.from(document.querySelectorAll('[data-testid="incident-row"]'));
  const count = document.querySelector('[data-testid="incident-count"]');
  const apply = () => {
    const text = form.elements.q.value.trim().toLowerCase();
    const state = form.elements.state.value, cause = form.elements.cause.value;
    const severity = form.elements.severity.value;
    let shown = 0;
    for (const row of rows) {
      const ok = (!text || row.textContent.toLowerCase().includes(text))
        && (state === "all" || row.dataset.state === state)
        && (!cause || row.dataset.cause === cause) && (!severity || row.dataset.severity === severity);
      row.hidden = !ok;
      shown += ok ? 1 : 0;
    }
    if (count) count.textContent = shown === rows.length ? rows.length + " incidents"
      : shown + " of " + rows.length + " incidents";
  };
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", (e) => e.preventDefault());
  apply();
})();
"""

SILENCES_SCRIPT = """
(() => {
  const form = document.querySelector('[data-testid="silence-form"]');
  if (!form) return;
  const api = form.dataset.api || "";
  const errorBox = document.querySelector('[data-testid="silence-error"]');
  const statusBox = document.querySelector('[data-testid="silence-status"]');
  const previewBox = document.querySelector('[data-testid="silence-preview"]');
  const token = form.elements.token, KEY = "tailhound.console.token";
  try { token.value = sessionStorage.getItem(KEY) || ""; } catch (e) { /* storage off */ }
  token.addEventListener("change", () => {
    try { sessionStorage.setItem(KEY, token.value.trim()); } catch (e) { /* storage off */ }
  });
  const show = (box, text) => { box.textContent = text || ""; box.hidden = !text; };
  const matchers = () => form.elements.matchers.value.split("\\n").map((m) => m.trim()).filter(Boolean);
  async function call(method, path, body) {
    const headers = {Accept: "application/json"};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (token.value.trim()) headers.Authorization = "Bearer " + token.value.trim();
    const resp = await fetch(api + path, {method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body)});
    let data = null;
    try { data = await resp.json(); } catch (e) { /* not JSON */ }
    if (!resp.ok) throw new Error((data && data.error) || ("HTTP " + resp.status + " " + resp.statusText));
    return data;
  }
  // the notifier applies a change within a tick: wait until the list shows it, then reload the page
  async function reloadWhen(done) {
    for (let i = 0; i < 20; i++) {
      try { if (done(await call("GET", "/api/v1/silences?all=1"))) break; } catch (e) { break; }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    location.reload();
  }
  function renderPreview(data) {
    const found = data.matches || [], total = data.total ?? found.length;
    const head = document.createElement("p");
    head.textContent = (total === 1 ? "1 incident matches" : total + " incidents match") +
      (total > found.length ? " (the first " + found.length + " listed):" : found.length ? ":" : ".");
    const list = document.createElement("ul");
    for (const m of found) {
      const item = document.createElement("li");
      item.textContent = m.root_cause + " (" + m.state + "): " + m.summary + " [" + m.incident_id + "]";
      list.append(item);
    }
    previewBox.replaceChildren(head, list);
    previewBox.hidden = false;
    show(errorBox, (data.errors || []).join("; "));
  }
  form.querySelector('[data-testid="silence-preview-button"]').addEventListener("click", async () => {
    show(errorBox, "");
    if (!matchers().length) { show(errorBox, "Write at least one matcher, e.g. node=\\"gpu-node-2\\"."); return; }
    try {
      const query = matchers().map((m) => "matcher=" + encodeURIComponent(m)).join("&");
      renderPreview(await call("GET", "/api/v1/silences/preview?" + query));
    } catch (err) { show(errorBox, err.message); }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    show(errorBox, "");
    const body = {matchers: matchers(), duration: form.elements.duration.value.trim(),
      author: form.elements.author.value.trim(), comment: form.elements.comment.value.trim()};
    const button = form.querySelector('[data-testid="silence-create-button"]');
    button.disabled = true;
    try {
      const created = await call("POST", "/api/v1/silences", body);
      show(statusBox, "Created silence " + created.id + "; waiting for the notifier to apply it...");
      await reloadWhen((list) => list.some((s) => s.id === created.id));
    } catch (err) { show(errorBox, err.message); button.disabled = false; }
  });
  for (const button of document.querySelectorAll('[data-testid="silence-expire"]')) {
    button.addEventListener("click", async () => {
      const id = button.dataset.silence;
      show(errorBox, "");
      button.disabled = true;
      try {
        await call("DELETE", "/api/v1/silences/" + encodeURIComponent(id));
        show(statusBox, "Expired silence " + id + "; waiting for the notifier to apply it...");
        await reloadWhen((list) => !list.some((s) => s.id === id && s.state !== "expired"));
      } catch (err) { show(errorBox, err.message); button.disabled = false; }
    });
  }
})();
"""
