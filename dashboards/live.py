"""The live dashboard's pages and data, free of any web framework (the exporter serves them).

The HTML pages are shells: they hold no report data, only escaped names and links, and fetch
everything from the JSON API with the bearer token, so a page load needs no credentials and the
data never sits in a cacheable HTML response.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from preemptscope.analysis.report import DeploymentReport, Report, Window
from preemptscope.dashboards.figures import STATE_LABELS, esc

from preemptscope.errors import ConfigError

RANGES: dict[str, timedelta | None] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "all": None,
}
DEFAULT_RANGE = "1h"
_RANGE_RE = re.compile(r"^(\d{1,5})([smhd])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

# Pages load scripts and styles from this server only; 'unsafe-eval' is for regl (WebGL traces).
PAGE_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src blob:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def parse_range(text: str) -> timedelta | None:
    """'15m', '1h', '6h', '24h', '7d', any '<n>s|m|h|d', or 'all' (None: everything)."""
    text = text.strip().lower()
    if text in RANGES:
        return RANGES[text]
    match = _RANGE_RE.match(text)
    if not match or int(match.group(1)) == 0:
        raise ConfigError(f"range {text!r}: expected e.g. 15m, 1h, 24h, 7d or all")
    return timedelta(**{_UNIT[match.group(2)]: int(match.group(1))})


def has_data(window: Window) -> bool:
    return window.samples > 0 or window.kv_usage_max is not None or bool(window.preemptions)


def complete_before(report: Report, deployment: str) -> datetime | None:
    """A deployment's windows ending at or before this hold every record they will get: the
    live service's `complete_before` (its inputs are read only that far), else the report's
    time (every input read to then; None for a batch report without one: all complete)."""
    cuts = report.parameters.get("complete_before")
    cut = cuts.get(deployment) if isinstance(cuts, dict) else None
    return datetime.fromisoformat(cut) if isinstance(cut, str) else report.generated_at


def window_split(dep: DeploymentReport, report: Report) -> tuple[Window | None, Window | None]:
    """(the last complete window holding data, the window still filling).

    Gauges and headline numbers describe complete windows: a window still filling changes
    with every record, and one just ended can still get lines stamped in its last second or
    a scrape started before its end. A batch report (no time) makes every window complete.
    """
    now, cut = report.generated_at, complete_before(report, dep.name)
    filling: Window | None = None
    for window in reversed(dep.windows):
        if cut is not None and window.end > cut:
            if filling is None and now is not None and window.start <= now and has_data(window):
                filling = window
            continue
        if has_data(window):
            return window, filling
    return None, filling


def window_json(window: Window | None) -> dict[str, Any] | None:
    """The headline numbers of one window, as the live page shows them."""
    if window is None:
        return None
    return {
        "start": window.start.isoformat(),
        "end": window.end.isoformat(),
        "samples": window.samples,
        "preemptions": window.preemptions,
        "kv_usage_max": window.kv_usage_max,
        "waiting_max": window.waiting_max,
        "over_capacity": window.over_capacity,
    }


def deployment_summaries(report: Report) -> list[dict[str, Any]]:
    """One row per deployment for the list page: verdict badge and headline numbers (of the
    last complete window, beside the one filling)."""
    rows = []
    for dep in report.deployments:
        last, filling = window_split(dep, report)
        rows.append(
            {
                "name": dep.name,
                "state": dep.verdict.state,
                "state_label": STATE_LABELS.get(dep.verdict.state, dep.verdict.state),
                "problem": dep.verdict.problem,
                "limit": dep.verdict.limit,
                "preemptions": dep.preemptions.total,
                "preemptions_exact": dep.preemptions.exact,
                "episodes": len(dep.episodes),
                "windows": len(dep.windows),
                "last_window_end": last.end.isoformat() if last else None,
                "kv_usage_max": last.kv_usage_max if last else None,
                "complete_window": window_json(last),
                "filling_window": window_json(filling),
                "model": dep.capacity.model,
            }
        )
    return rows


def _page(root: str, title: str, body: str, scripts: tuple[str, ...]) -> str:
    tags = "\n".join(f'<script src="{esc(root)}/static/{name}"></script>' for name in scripts)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{esc(title)}</title>
<link rel="stylesheet" href="{esc(root)}/static/style.css">
</head>
<body data-root="{esc(root)}">
<header class="top"><h1><a href="{esc(root)}/">preemptscope</a></h1>
<span class="meta" id="status" role="status">loading…</span></header>
<main>
<section class="panel" id="login" hidden>
<h3>Sign in</h3>
<p>This preemptscope service needs its bearer token (<code>--token</code>).</p>
<form class="login" id="login-form">
<input type="password" id="token" name="token" autocomplete="current-password"
 placeholder="token" aria-label="token" required>
<button type="submit">Open dashboard</button>
</form>
</section>
{body}
</main>
{tags}
</body>
</html>
"""


def index_page_html(root: str = "") -> str:
    """The deployment list with verdict badges (filled in by live.js)."""
    body = """<section class="panel" id="content" hidden>
<div class="controls"><button type="button" id="download">Download HTML report</button>
<span class="status" id="download-status"></span></div>
<h3>Deployments</h3>
<p class="status" id="hint">Open a deployment for its verdict card and figures (timeline,
preemptions vs tail latency, capacity), updating in place.</p>
<ul class="deployments" id="deployments"></ul>
<p class="status" id="empty" hidden>No deployment yet: waiting for log lines or scrapes.</p>
</section>"""
    return _page(root, "preemptscope", body, ("live.js",))


def deployment_page_html(name: str, root: str = "") -> str:
    """One deployment: verdict card and the three figures, refreshed in place."""
    buttons = "".join(
        f'<button type="button" data-range="{key}" aria-pressed="false">{key}</button>'
        for key in RANGES
    )
    body = f"""<section class="deployment" id="content" data-deployment="{esc(name)}" hidden>
<div class="controls" role="group" aria-label="time range">range {buttons}
<span class="status" id="updated"></span></div>
<div id="card"></div>
<table class="windows-now" id="windows-now" hidden>
<thead><tr><th></th><th>window</th><th>preemptions</th><th>KV max</th><th>waiting max</th>\
<th>over capacity</th></tr></thead><tbody></tbody></table>
<div class="figure timeline" id="fig-timeline"></div>
<div class="grid2">
<div class="figure" id="fig-tail"></div>
<div class="figure" id="fig-capacity"></div>
</div>
</section>"""
    return _page(root, f"{name} · preemptscope", body, ("plotly.min.js", "plots.js", "live.js"))
