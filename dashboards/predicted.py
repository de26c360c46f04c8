"""What the replay predicts, as HTML beside the figures: the what-if sweep's label and the
figures per priority class (now and for each candidate setting).

Every number comes from the values the JSON report holds (Advice.predicted's per_priority,
the sweep's outcomes): nothing is recomputed here. A figure the replay did not give (a class
with no TTFT, an observed class's preemptions, which nothing counts) is shown as "—", never 0.
All text is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from preemptscope.analysis.report import DeploymentReport
from preemptscope.dashboards._plot import esc

# per_priority of the JSON: priority (as text) -> {requests, e2e_p99, ttft_p99, preemptions}.
ClassFigures = Mapping[str, Mapping[str, float | int | None]]
CLASS_COLUMNS = ("requests", "e2e_p99", "ttft_p99", "preemptions")
_HEADINGS = ("Setting", "Priority", "Requests", "e2e p99", "TTFT p99", "Preemptions")
MISSING = "—"


def _cell(key: str, value: float | int | None) -> str:
    if value is None:
        return MISSING
    if key in ("requests", "preemptions"):
        return f"{value:,.0f}"
    return f"{value:,.2f} s" if value < 100 else f"{value:,.0f} s"


def classes_table(rows: Sequence[tuple[str, ClassFigures]], *, kind: str) -> str:
    """One row per (setting, priority class): requests, e2e p99, TTFT p99, preemptions.
    Lower priority values are served first under the priority policy."""
    body: list[str] = []
    for label, classes in rows:
        for i, cls in enumerate(sorted(classes, key=_order)):
            figures = classes[cls]
            cells = "".join(
                f'<td class="num" data-key="{key}">{esc(_cell(key, figures.get(key)))}</td>'
                for key in CLASS_COLUMNS
            )
            setting = f"<th>{esc(label)}</th>" if i == 0 else "<th></th>"
            body.append(
                f'<tr data-setting="{esc(label)}" data-priority="{esc(cls)}">{setting}'
                f'<td class="num">{esc(cls)}</td>{cells}</tr>'
            )
    if not body:
        return ""
    head = "".join(
        f'<th class="{"num" if i else "word"}">{h}</th>' for i, h in enumerate(_HEADINGS)
    )
    return (
        f'<div class="scroll"><table class="classes" data-kind="{esc(kind)}"><thead><tr>'
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _order(cls: str) -> tuple[int, str]:
    try:
        return (int(cls), "")
    except ValueError:
        return (0, cls)


def advice_classes_html(dep: DeploymentReport) -> str:
    """Per class, the replay of now and each replayed suggestion (Advice.predicted); empty
    when the data has no priority classes or nothing was replayed."""
    rows: list[tuple[str, ClassFigures]] = []
    for advice in sorted(dep.advice, key=lambda a: a.rank):
        predicted = advice.predicted or {}
        now = predicted.get("now", {}).get("per_priority")
        new = predicted.get("with_change", {}).get("per_priority")
        if not new:
            continue
        if not rows and now:
            rows.append(("now (replayed)", now))
        flag = advice.flag or advice.action.replace("_", " ")
        rows.append((f"#{advice.rank} {flag} {advice.suggested or ''}".strip(), new))
    table = classes_table(rows, kind="advice")
    if not table:
        return ""
    return (
        '<section class="panel classes-advice"><h3>What to do, per priority class</h3>'
        '<p class="note">The replay of now and of each suggestion, per priority class (lower '
        "values are served first under the priority policy); the suggestions' labels above say "
        f"how far the replay is trusted.</p>{table}</section>"
    )


def sweep_html(view: Mapping[str, Any]) -> str:
    """Under the capacity figure: the sweep's label and calibration (the one rule behind every
    "verified"), and per class each max_num_seqs replayed."""
    verified = bool(view.get("verified"))
    parts = [
        f'<section class="panel whatif-sweep" data-verified="{str(verified).lower()}">',
        "<h3>What-if: max_num_seqs (simulated)</h3>",
        f'<p class="whatif-label">{esc(view.get("label", ""))}.</p>',
        f'<p class="note">Step cost: {esc(view.get("calibration", ""))}. The label is the '
        "one every prediction of this replay carries, the advice's included.</p>",
    ]
    if view.get("sharing"):  # the replay's prefix-cache hit rate beside the observed one
        parts.append(f'<p class="note whatif-sharing">{esc(view["sharing"])}.</p>')
    table = classes_table(view.get("classes") or [], kind="sweep")
    if table:
        parts.append(f'<p class="note">Per priority class:</p>{table}')
    parts.append("</section>")
    return "\n".join(parts)
