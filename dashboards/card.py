"""The verdict card: the verdict, its evidence numbers and the ranked advice, as escaped HTML.

Owns `verdict_card_html`; every log-derived string is escaped here.
"""

from __future__ import annotations

from preemptscope.analysis.report import DeploymentReport
from preemptscope.analysis.verdict import limit_line
from preemptscope.dashboards._plot import STATE_LABELS, esc


def _fmt_value(value: float | None) -> str:
    if value is None:
        return ""
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.3g}"


def verdict_card_html(dep: DeploymentReport) -> str:
    """An escaped HTML fragment: verdict, evidence numbers, ranked advice with flag values."""
    verdict = dep.verdict
    state = verdict.state
    pre = dep.preemptions
    if pre.total is None:
        counted = "no preemption count in the inputs"
    else:
        quality = "exact" if pre.exact else "lower bound"
        counted = f"{pre.total:,} preemptions ({quality}, from {pre.evidence.replace('_', ' ')})"
        if pre.cache_reset_preemptions:
            counted += f", {pre.cache_reset_preemptions:,} of them in cache resets"
        if pre.since_start is not None and pre.since_start != pre.total:
            counted += f"; {pre.since_start:,} since the engine started"
    parts = [
        f'<section class="verdict-card state-{esc(state)}" data-state="{esc(state)}">',
        f'<h2><span class="badge state-{esc(state)}">{esc(STATE_LABELS.get(state, state))}</span> '
        f"{esc(dep.name)}</h2>",
        '<p class="summary">'
        + (
            f"Problem: <b>{esc(verdict.problem)}</b> · "
            if verdict.problem not in ("none", "unknown")
            else ""
        )
        + f"{esc(counted)}"
        f" · {len(dep.episodes)} over-capacity episode{'s' if len(dep.episodes) != 1 else ''}"
        f" · {len(dep.windows)} windows</p>",
    ]
    limit = limit_line(verdict)
    if limit is not None:
        parts.append(f'<p class="limit" data-limit="{esc(verdict.limit)}">{esc(limit)}</p>')
    if verdict.evidence:
        parts.append('<h3>Evidence</h3><table class="evidence"><tbody>')
        for ev in verdict.evidence:
            if ev.code == "limit" and limit is not None:
                continue  # the limit line above says it
            parts.append(
                f'<tr data-code="{esc(ev.code)}"><td class="num">{esc(_fmt_value(ev.value))}</td>'
                f"<td>{esc(ev.message)}</td></tr>"
            )
        parts.append("</tbody></table>")
    if dep.advice:
        parts.append("<h3>What to do</h3>")
        if dep.advice_check:  # the replay of now, once for every replayed item
            parts.append(f'<p class="advice-check">{esc(dep.advice_check)}.</p>')
        parts.append(
            '<table class="advice"><thead><tr><th>#</th><th>Action</th>'
            "<th>Flag</th><th>Current</th><th>Suggested</th><th>Why</th></tr></thead><tbody>"
        )
        for advice in sorted(dep.advice, key=lambda a: a.rank):
            parts.append(
                f"<tr><td>{advice.rank}</td><td>{esc(advice.action.replace('_', ' '))}</td>"
                f"<td><code>{esc(advice.flag or '')}</code></td>"
                f"<td>{esc(advice.current or '')}</td>"
                f"<td><b>{esc(advice.suggested or '')}</b></td><td>{esc(advice.reason)}</td></tr>"
            )
        parts.append("</tbody></table>")
    parts.append("</section>")
    return "\n".join(parts)
