"""The batch HTML report: ONE self-contained file that opens offline.

plotly.js (the copy bundled in the plotly package) is inlined once; the figures travel as one JSON
block. A Content-Security-Policy forbids every network request and every script without this
file's nonce, so even an escaping mistake could not load or run anything. Log text is escaped
everywhere: HTML via `html.escape`, JSON inside <script> with `<`, `>` and `&` as \\u escapes.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import plotly
from preemptscope.analysis.report import DeploymentReport, Report, SourceSummary
from preemptscope.dashboards.figures import (
    STATE_LABELS,
    WhatIfInput,
    capacity_figure,
    esc,
    plotly_json,
    preemption_vs_tail_figure,
    timeline_figure,
    verdict_card_html,
)
from preemptscope.dashboards.predicted import advice_classes_html, sweep_html

from preemptscope.errors import InputError

PLOT_CONFIG = {"responsive": True, "displaylogo": False, "scrollZoom": False}

_JSON_SCRIPT_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


@cache
def plotly_js() -> str:
    """The minified plotly.js shipped inside the plotly Python package (no CDN)."""
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    text = path.read_text(encoding="utf-8")
    if "</script" in text.lower():  # would end the inline <script> early
        raise RuntimeError(f"{path}: contains '</script', cannot be inlined")
    return text


@cache
def static_text(name: str) -> str:
    """A file from dashboards/static/ (the stylesheet and scripts shared with the live page)."""
    text = resources.files("preemptscope.dashboards").joinpath("static", name).read_text()
    return text


def script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no `</script>`, `<!--` or `]]>` can appear."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=_json_default)
    return text.translate(_JSON_SCRIPT_ESCAPES)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _fmt(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _sources_table(sources: list[SourceSummary]) -> str:
    if not sources:
        return "<p>No sources.</p>"
    rows = []
    for src in sources:
        records = ", ".join(f"{esc(k)} {v:,}" for k, v in sorted(src.records.items()))
        share = ""
        if src.lines and src.unrecognized_lines is not None:
            share = f" ({src.unrecognized_lines / src.lines:.2%})"
        rows.append(
            "<tr>"
            f"<td><code>{_breakable_path(src.path)}</code></td>"
            f"<td class='word'>{esc(src.kind)}</td><td class='word'>{esc(src.deployment)}</td>"
            f"<td class='num'>{_fmt(src.lines)}</td>"
            f"<td class='num'>{_fmt(src.unrecognized_lines)}{share}</td>"
            f"<td class='word'>{esc(src.log_era or '')}</td>"
            f"<td class='word'>{esc(src.vllm_version or '')}</td>"
            f"<td class='word'>{esc(src.timezone or '')}</td><td>{records}"
            + "".join(f'<div class="note">{esc(note)}</div>' for note in src.notes)
            + "</td>"
            "</tr>"
        )
    return (
        '<div class="scroll"><table class="sources"><thead><tr><th>Source</th><th>Kind</th>'
        "<th>Deployment</th><th class='num'>Lines read</th><th class='num'>Unrecognised</th>"
        "<th>Log era</th><th>vLLM</th><th>Time zone</th><th>Records</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _breakable_path(path: str) -> str:
    """An escaped path that may wrap after each "/", and nowhere inside a name."""
    return "/<wbr>".join(f'<span class="word">{esc(part)}</span>' for part in path.split("/"))


def _parameters_table(parameters: dict[str, Any]) -> str:
    if not parameters:
        return "<p>Defaults.</p>"
    rows = "".join(
        f"<tr><th><code>{esc(k)}</code></th><td><code>"
        f"{esc(v if isinstance(v, str) else json.dumps(v, default=str))}</code></td></tr>"
        for k, v in sorted(parameters.items())
    )
    return f'<table class="parameters"><tbody>{rows}</tbody></table>'


def _deployment_section(
    index: int,
    dep: DeploymentReport,
    figures: dict[str, dict[str, Any]],
    whatif: Sequence[WhatIfInput] | None,
    sweep: Mapping[str, Any] | None = None,
) -> str:
    ids = {kind: f"fig-{index}-{kind}" for kind in ("timeline", "tail", "capacity")}
    figures[ids["timeline"]] = plotly_json(timeline_figure(dep))
    figures[ids["tail"]] = plotly_json(preemption_vs_tail_figure(dep))
    figures[ids["capacity"]] = plotly_json(capacity_figure(dep, whatif))
    first, last = (dep.windows[0].start, dep.windows[-1].end) if dep.windows else (None, None)
    span = f"{first:%Y-%m-%d %H:%M} → {last:%Y-%m-%d %H:%M} UTC" if first and last else "no windows"
    return f"""
<section class="deployment" id="deployment-{index}">
{verdict_card_html(dep)}
{advice_classes_html(dep)}
<p class="status">{esc(span)} · sources: {esc(", ".join(dep.sources) or "none")}</p>
<div class="figure timeline" id="{ids["timeline"]}"></div>
<div class="grid2">
<div class="figure" id="{ids["tail"]}"></div>
<div class="figure" id="{ids["capacity"]}"></div>
</div>
{sweep_html(sweep) if sweep else ""}
</section>"""


# Starts plotly.js from its inert <script type="text/plain"> copy as a blob: script. An inline
# script is compiled on the main thread before anything after it is parsed (~0.15 s for plotly.js
# in chromium); a script with a URL is compiled on a background thread while the main thread goes
# on parsing the rest of the page and the figure data. The compile hint asks V8 to compile every
# function there too, not lazily on the main thread at first call (plotly.js then runs in ~0.5 s
# of main-thread time instead of ~0.9 s; other browsers ignore the comment). The blob inherits
# this file's nonce (no CSP change: a nonce allows any URL); where a blob script cannot load, the
# same text runs inline. (Moving the copy into <head> to start sooner was no faster and delayed
# the first paint of the verdict cards from 0.15 s to 0.3 s.)
_START_PLOTLY = """
(function () {
  var source = document.getElementById("preemptscope-plotly");
  var nonce = document.currentScript.nonce;
  function inline() {
    var script = document.createElement("script");
    script.nonce = nonce;
    script.text = source.textContent;
    document.head.appendChild(script);
    if (!window.Plotly) throw new Error("plotly.js did not load");
  }
  window.preemptscopePlotly = new Promise(function (resolve, reject) {
    function fallback() {
      try { inline(); resolve(); } catch (err) { reject(err); }
    }
    var url;
    try {
      url = URL.createObjectURL(new Blob(
        ["//# allFunctionsCalledOnLoad\\n", source.textContent], { type: "text/javascript" }));
    } catch (err) {
      fallback();
      return;
    }
    var script = document.createElement("script");
    script.nonce = nonce;
    script.src = url;
    script.onload = function () { URL.revokeObjectURL(url); resolve(); };
    script.onerror = function () { URL.revokeObjectURL(url); fallback(); };
    document.head.appendChild(script);
  });
})();
"""

# Parses the figures while plotly.js compiles, then draws each one (through plots.js); records
# when all are drawn (tests and the benchmark read window.__preemptscopeRendered).
_LOADER = """
(function () {
  var figures = JSON.parse(document.getElementById("preemptscope-figures").textContent);
  var config = JSON.parse(document.getElementById("preemptscope-config").textContent);
  var ids = Object.keys(figures);
  window.preemptscopePlotly.then(function () {
    return Promise.all(ids.map(function (id) {
      return window.preemptscopePlots.draw(id, figures[id], config);
    }));
  }).then(function () {
    window.__preemptscopeRendered = performance.now();
    document.body.setAttribute("data-rendered", String(ids.length));
  }, function (err) {
    document.body.setAttribute("data-render-error", String(err));
    throw err;
  });
})();
"""


def _title(report: Report) -> str:
    states = ", ".join(
        f"{d.name} {STATE_LABELS.get(d.verdict.state, d.verdict.state).lower()}"
        for d in report.deployments[:3]
    )
    more = f" +{len(report.deployments) - 3}" if len(report.deployments) > 3 else ""
    return f"preemptscope: {states}{more}" if states else "preemptscope report"


def render_report_html(
    report: Report,
    *,
    whatif: Mapping[str, Sequence[WhatIfInput]] | None = None,
    sweeps: Mapping[str, Mapping[str, Any]] | None = None,
    overview: str = "",
) -> str:
    """The whole report as one HTML document (plotly.js inlined once, no network access).

    `whatif`: per deployment name, simulated (max_num_seqs, preemptions, p99) points for the
    capacity figure (see `figures.whatif_points`); `sweeps`: per deployment name, the sweep's
    label, calibration and per-class rows (`predicted.sweep_html`). `overview`: a ready HTML
    section shown first (the fleet table of `report --prometheus`, preemptscope/fleet.py).
    """
    nonce = secrets.token_urlsafe(16)
    figures: dict[str, dict[str, Any]] = {}
    curves = whatif or {}
    details = sweeps or {}
    sections = [
        _deployment_section(i, d, figures, curves.get(d.name), details.get(d.name))
        for i, d in enumerate(report.deployments)
    ]
    toc = "".join(
        f'<li><a href="#deployment-{i}">{esc(d.name)}</a> '
        f'<span class="badge state-{esc(d.verdict.state)}">'
        f"{esc(STATE_LABELS.get(d.verdict.state, d.verdict.state))}</span></li>"
        for i, d in enumerate(report.deployments)
    )
    generated = (
        report.generated_at.isoformat(timespec="seconds") if report.generated_at else "unknown"
    )
    # regl (WebGL traces) compiles shaders with Function(): 'unsafe-eval' is needed for scattergl.
    csp = (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}' 'unsafe-eval'; "
        "style-src 'unsafe-inline'; img-src data: blob:; font-src data:; "
        "worker-src blob:; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="preemptscope">
<title>{esc(_title(report))}</title>
<style>{static_text("style.css")}</style>
</head>
<body>
<header class="top"><h1>preemptscope report</h1>
<span class="meta">generated {esc(generated)} · schema v{report.schema_version} ·
{len(report.deployments)} deployment{"s" if len(report.deployments) != 1 else ""}</span></header>
<main>
{overview}
<section class="panel"><h3>Deployments</h3><ul class="deployments">{toc}</ul></section>
{"".join(sections)}
<section class="panel" id="sources"><h3>Sources</h3>{_sources_table(report.sources)}</section>
<section class="panel" id="parameters"><h3>Parameters</h3>
{_parameters_table(report.parameters)}</section>
</main>
<script type="text/plain" id="preemptscope-plotly">{plotly_js()}</script>
<script nonce="{nonce}">{static_text("plots.js")}{_START_PLOTLY}</script>
<script type="application/json" id="preemptscope-config">{script_json(PLOT_CONFIG)}</script>
<script type="application/json" id="preemptscope-figures">{script_json(figures)}</script>
<script nonce="{nonce}">{_LOADER}</script>
</body>
</html>
"""


def write_report_html(
    report: Report,
    path: str | Path,
    *,
    whatif: Mapping[str, Sequence[WhatIfInput]] | None = None,
    sweeps: Mapping[str, Mapping[str, Any]] | None = None,
    overview: str = "",
) -> None:
    """Write the report atomically (a reader never sees half a file)."""
    target = Path(path)
    text = render_report_html(report, whatif=whatif, sweeps=sweeps, overview=overview)
    tmp: Path | None = None
    try:
        # Created exclusively under an unpredictable name in the target's directory: a file
        # or symlink planted at a predictable `.NAME.tmp` is never followed or overwritten.
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        tmp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        tmp.chmod(0o644)  # mkstemp's 0600 would make a report only its writer can read
        tmp.replace(target)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise InputError(str(target), f"cannot write the HTML report: {exc.strerror}") from exc
