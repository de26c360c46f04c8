"""The verdict's evidence: one numbered sentence per finding, and the words they share.

Owns how a window, a queue, a preemption count, a latency tail or a correlation becomes an
`Evidence` item, and the problem's kind (capacity, throughput, ordering). Every number it
quotes is the Report's own; it decides no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from preemptscope.analysis.correlation import (
    episode_duration_s,
    preemption_signal,
    run_duration_s,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    Capacity,
    Correlation,
    Episode,
    Evidence,
    LimitName,
    Preemptions,
    VerdictState,
    Window,
)
from preemptscope.analysis.windows import LIMIT_BUDGET, LIMIT_SEQS

QUALITY_WORDS = {
    "exact": "exact",
    "lower_bound": "lower bound",
    "inferred": "inferred",
    "none": "no count",
}


def say_seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def say_pct(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def say_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def say_lasting(seconds: float) -> str:
    return "one record (no duration)" if seconds < 1 else f"{say_duration(seconds)} by its records"


def say_hhmm(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def why_not_current(longest: Episode, current: bool, params: AnalysisParams) -> str:
    if current:
        return ""
    if episode_duration_s(longest) < params.min_episode_s:
        return f" (shorter than the {say_duration(params.min_episode_s)} an episode needs)"
    return (
        f" (all sustained episodes ended more than {say_duration(params.stale_after_s)} before "
        "the end of the data)"
    )


def ordering_evidence(
    windows: Sequence[Window], correlation: Correlation, params: AnalysisParams
) -> Evidence:
    preempting = [w for w in windows if (preemption_signal(w) or 0) > 0]
    full = sum(1 for w in preempting if (w.kv_usage_max or 0) >= params.kv_saturated)
    ratio = mean_latency_ratio(correlation)
    mean = (
        f"; mean latency {ratio:.2f}x that of quiet windows (the loss lands on few requests)"
        if ratio is not None
        else ""
    )
    return Evidence(
        "ordering",
        f"scheduling_policy=priority and KV >= {say_pct(params.kv_saturated)} in only {full} of "
        f"{len(preempting)} preempting windows{mean}: priority decides who loses more than "
        "capacity decides how much is lost",
        float(full) / len(preempting) if preempting else None,
    )


def queue_grows(run: Sequence[Window], params: AnalysisParams) -> bool:
    """Waiting at the end of the run is queue_growth x (at least) what it was at the start."""
    first = run[0].waiting_mean or 0.0
    last = run[-1].waiting_mean or 0.0
    return last >= params.queue_growth * max(first, 1.0)


def queue_run_evidence(
    run: Sequence[Window], params: AnalysisParams, *, sustained: bool = True
) -> Evidence:
    kv = [w.kv_usage_max for w in run if w.kv_usage_max is not None]
    peak = f"; peak KV {say_pct(max(kv))}" if kv else ""
    first, last = run[0].waiting_mean or 0.0, run[-1].waiting_mean or 0.0
    running = [w.running_max for w in run if w.running_max is not None]
    held = f", up to {max(running)} running" if running else ""
    short = (
        ""
        if sustained
        else f" (shorter than the {say_duration(params.min_episode_s)} an episode needs)"
    )
    grows = " (it grew: demand above the service rate)" if queue_grows(run, params) else ""
    return Evidence(
        "queue_bound",
        f"requests queued for {say_duration(run_duration_s(run))} from {say_hhmm(run[0].start)}"
        f"{short} with a limit pinned{held}{peak}; mean waiting went from {first:.0f} to "
        f"{last:.0f}{grows}",
        last,
    )


def preemption_evidence(preemptions: Preemptions, no_count_reason: str) -> list[Evidence]:
    """The preemption count as the JSON holds it: total, windows with / with a count."""
    p = preemptions
    out: list[Evidence] = []
    if p.total is None:
        if p.evidence == "none" and p.warning_lines == 0 and p.windows_counted == 0:
            out.append(
                Evidence(
                    "preemptions",
                    f"no preemption count in these inputs ({no_count_reason})",
                    None,
                    {"preemptions.total": None},
                )
            )
    elif p.evidence == "v0_warning_counter" and not p.warning_lines:
        out.append(
            Evidence(
                "preemptions",
                f"no preemption warning in this V0 log (V0 warns on the 1st, 51st, 101st, ... "
                f"preemption): a lower bound of {p.total} in {p.windows_counted} window(s)",
                float(p.total),
                {"preemptions.total": p.total, "preemptions.windows_counted": p.windows_counted},
            )
        )
    else:
        quality = "exact" if p.exact else "lower bound"
        source = p.evidence.replace("_", " ")
        unplaced = (
            f"; {p.unplaced} of them from warnings without a timestamp, in no window"
            if p.unplaced
            else ""
        )
        out.append(
            Evidence(
                "preemptions",
                f"{p.total} preemption{'' if p.total == 1 else 's'} ({quality}, from {source}) "
                f"in {p.windows_with_preemption} of {p.windows_counted} window(s) with a "
                f"count{unplaced}",
                float(p.total),
                {
                    "preemptions.total": p.total,
                    "preemptions.windows_with_preemption": p.windows_with_preemption,
                    "preemptions.windows_counted": p.windows_counted,
                    "preemptions.unplaced": p.unplaced,
                },
            )
        )
    return out


def window_evidence(windows: Sequence[Window], preemptions: Preemptions) -> list[Evidence]:
    out: list[Evidence] = []
    inferred = [w for w in windows if w.likely_preempting]
    if inferred:
        out.append(
            Evidence(
                "likely_preempting",
                f"{len(inferred)} window(s) likely preempting (inferred, not a count: KV full, "
                "requests waiting, running dropping)",
                float(len(inferred)),
            )
        )
    resets = [w for w in windows if w.forced_preemptions]
    if resets:
        out.append(
            Evidence(
                "cache_reset",
                f"{preemptions.cache_reset_preemptions} preemptions in {len(resets)} window(s) "
                "look like cache resets (every running request preempted at once with KV low): "
                "not counted as over capacity",
                float(preemptions.cache_reset_preemptions),
                {"preemptions.cache_reset_preemptions": preemptions.cache_reset_preemptions},
            )
        )
    if preemptions.since_start is not None and preemptions.since_start != preemptions.total:
        out.append(
            Evidence(
                "counter_since_start",
                f"cumulative counter reached {preemptions.since_start} (since engine start, "
                "including preemptions before or between the data)",
                float(preemptions.since_start),
                {"preemptions.since_start": preemptions.since_start},
            )
        )
    return out


def queue_evidence(active: Sequence[Window], params: AnalysisParams) -> list[Evidence]:
    if not active:
        return []
    out: list[Evidence] = []
    kv_known = [w for w in active if w.kv_usage_max is not None]
    if kv_known:
        saturated = sum(1 for w in kv_known if (w.kv_usage_max or 0) >= params.kv_saturated)
        peak = max(w.kv_usage_max or 0 for w in kv_known)
        out.append(
            Evidence(
                "kv_saturated",
                f"KV cache >= {say_pct(params.kv_saturated)} in {saturated} of "
                f"{len(kv_known)} active "
                f"windows ({say_pct(saturated / len(kv_known))}); peak {say_pct(peak)}",
                saturated / len(kv_known),
            )
        )
    waiting_known = [w for w in active if w.waiting_max is not None]
    if waiting_known:
        queued = sum(1 for w in waiting_known if (w.waiting_max or 0) > 0)
        peak_wait = max(w.waiting_max or 0 for w in waiting_known)
        out.append(
            Evidence(
                "waiting",
                f"requests waiting in {queued} of {len(waiting_known)} active windows "
                f"({say_pct(queued / len(waiting_known))}); peak {peak_wait}",
                queued / len(waiting_known),
            )
        )
    capacity_known = [w for w in active if w.waiting_for_capacity_max]
    if capacity_known:
        peak_cap = max(w.waiting_for_capacity_max or 0 for w in capacity_known)
        out.append(
            Evidence(
                "waiting_for_capacity",
                f"peak {peak_cap} request(s) waiting that the scheduler did not skip "
                "(num_requests_waiting_by_reason{reason=capacity}: waiting for a request slot, "
                "token budget or KV blocks, not for KV alone)",
                float(peak_cap),
            )
        )
    return out


def latency_evidence(c: Correlation, params: AnalysisParams) -> list[Evidence]:
    out: list[Evidence] = []
    if c.metric is None:
        return out
    n_with, n_without = c.windows_with_preemption, c.windows_without_preemption
    base = {
        "correlation.metric": c.metric,
        "correlation.windows_with_preemption": n_with,
        "correlation.windows_without_preemption": n_without,
    }
    if c.p99_over_mean_with is not None and c.p99_over_mean_without is not None:
        out.append(
            Evidence(
                "p99_over_mean",
                f"{c.metric} p99/mean {c.p99_over_mean_with:.1f} in windows with preemption vs "
                f"{c.p99_over_mean_without:.1f} in quiet windows (medians over {n_with} and "
                f"{n_without} windows)",
                c.p99_over_mean_with,
                {
                    **base,
                    "correlation.p99_over_mean_with": c.p99_over_mean_with,
                    "correlation.p99_over_mean_without": c.p99_over_mean_without,
                },
            )
        )
        if c.p99_with is not None and c.p99_without is not None:
            out.append(
                Evidence(
                    "p99",
                    f"{c.metric} p99 {say_seconds(c.p99_with)} in windows with preemption vs "
                    f"{say_seconds(c.p99_without)} in quiet windows (medians)",
                    c.p99_with,
                    {
                        "correlation.metric": c.metric,
                        "correlation.p99_with": c.p99_with,
                        "correlation.p99_without": c.p99_without,
                    },
                )
            )
    elif c.p99_over_mean_with is not None:
        out.append(
            Evidence(
                "p99_over_mean",
                f"{c.metric} p99/mean {c.p99_over_mean_with:.1f} in windows with preemption "
                f"(median over {n_with} windows; no quiet window to compare)",
                c.p99_over_mean_with,
                {
                    "correlation.metric": c.metric,
                    "correlation.windows_with_preemption": n_with,
                    "correlation.p99_over_mean_with": c.p99_over_mean_with,
                },
            )
        )
    out += rho_evidence(c, params)
    return out


def rho_evidence(c: Correlation, params: AnalysisParams) -> list[Evidence]:
    """A rank correlation is evidence only when positive, significant and from enough windows."""
    what = f"rank correlation of preemptions with {c.metric} p99/mean"
    quotes: dict[str, float | int | str | None] = {
        "correlation.pairs": c.pairs,
        "correlation.conclusion": c.conclusion,
    }
    if c.conclusion == "too_few":
        return [
            Evidence(
                "correlation_inconclusive",
                f"{what}: too few windows to tell ({c.pairs} window pair(s); at least "
                f"{params.min_correlation_windows} needed)",
                None,
                quotes,
            )
        ]
    if c.spearman_rho is None or c.p_value is None or c.rho_low is None or c.rho_high is None:
        return []
    quotes |= {
        "correlation.spearman_rho": c.spearman_rho,
        "correlation.p_value": c.p_value,
        "correlation.rho_low": c.rho_low,
        "correlation.rho_high": c.rho_high,
    }
    figures = (
        f"{c.spearman_rho:+.2f} over {c.pairs} windows (95 % interval {c.rho_low:+.2f} to "
        f"{c.rho_high:+.2f}, p = {c.p_value:.2g})"
    )
    if c.conclusion != "supports":
        return [
            Evidence(
                "correlation_inconclusive",
                f"{what}: {figures}: no sign here that preemption raises the tail",
                c.spearman_rho,
                quotes,
            )
        ]
    lag = ""
    if (
        c.best_lag_windows
        and c.best_lag_rho is not None
        and c.best_lag_rho > 0
        and c.best_lag_p_value is not None
        and c.best_lag_p_value < params.correlation_alpha
        and c.best_lag_pairs >= params.min_correlation_windows
    ):
        lag = (
            f"; strongest {c.best_lag_rho:+.2f} at a lag of {c.best_lag_windows} window(s) "
            f"({c.best_lag_pairs} pairs, p = {c.best_lag_p_value:.2g} after trying "
            f"{params.max_lag_windows + 1} lags)"
        )
        quotes |= {
            "correlation.best_lag_windows": c.best_lag_windows,
            "correlation.best_lag_rho": c.best_lag_rho,
            "correlation.best_lag_pairs": c.best_lag_pairs,
            "correlation.best_lag_p_value": c.best_lag_p_value,
        }
    return [Evidence("spearman_rho", f"{what}: {figures}{lag}", c.spearman_rho, quotes)]


def problem_kind(
    state: VerdictState,
    windows: Sequence[Window],
    correlation: Correlation,
    capacity: Capacity,
    params: AnalysisParams,
    limit: LimitName = "unknown",
) -> Literal["capacity", "throughput", "ordering", "none", "unknown"]:
    """Capacity (too little KV: everyone loses), throughput (slots or the token budget hold
    requests back with KV to spare) or ordering (priority moves the loss).

    Under the priority policy a preemption evicts a low-priority request for a high-priority
    one: the mean barely moves while the victims' tail grows, and KV is not persistently full.
    """
    if state == "ok":
        return "none"
    if state == "insufficient_data":
        return "unknown"
    if limit in (LIMIT_SEQS, LIMIT_BUDGET):
        return "throughput"
    if limit == "unknown" and not any(w.over_capacity for w in windows):
        return "throughput"  # a queue with KV to spare, whatever holds it
    if (capacity.scheduling_policy or "").lower() != "priority":
        return "capacity"
    preempting = [w for w in windows if (preemption_signal(w) or 0) > 0]
    saturated = [w for w in preempting if (w.kv_usage_max or 0) >= params.kv_saturated]
    mostly_full = bool(preempting) and len(saturated) / len(preempting) >= 0.5
    mean_ratio = mean_latency_ratio(correlation)
    if preempting and not mostly_full and (mean_ratio is None or mean_ratio <= 1.25):
        return "ordering"
    return "capacity"


def mean_latency_ratio(c: Correlation) -> float | None:
    """Mean latency with preemption over without (from the medians of p99 and p99/mean)."""
    if None in (c.p99_with, c.p99_without, c.p99_over_mean_with, c.p99_over_mean_without):
        return None
    assert c.p99_with is not None and c.p99_over_mean_with is not None
    assert c.p99_without is not None and c.p99_over_mean_without is not None
    if c.p99_over_mean_with == 0 or c.p99_over_mean_without == 0 or c.p99_without == 0:
        return None
    mean_with = c.p99_with / c.p99_over_mean_with
    mean_without = c.p99_without / c.p99_over_mean_without
    return mean_with / mean_without if mean_without > 0 else None
