"""The verdict: ok / at_risk / over_capacity / insufficient_data, with the numbers behind it.

Rules (thresholds in AnalysisParams, documented in docs/report.md):
- over_capacity: an over-capacity episode lasting >= min_episode_s that ended within
  stale_after_s of `now`. A window is over capacity when it preempts (counted or inferred,
  cache-reset bursts excluded) or queues with the KV cache full.
- at_risk: over-capacity windows that do not make a current sustained episode (a short burst,
  or an episode long before now), or KV >= kv_high in at_risk_kv_fraction of active windows.
  A single old isolated over-capacity window is reported but does not make the deployment at risk.
- A saturated window (a persistent queue with one of the scheduler's limits pinned: slots,
  token budget or KV) makes the deployment at least at_risk; a run of them lasting
  >= min_episode_s that ended within stale_after_s of `now` makes it over_capacity, the same
  episode rules as preemption. A saturated server is never ok.
- insufficient_data: fewer than min_samples stats records / scrapes and no counted preemption.
- ok otherwise (idle periods and cache-reset bursts never count against a deployment).

`limit` names the limit that held requests back in the flagged windows (find_limit); when two
bind, the replay of the advice decides which one's relief helps most (settle_limit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from preemptscope.analysis.correlation import (
    episode_duration_s,
    preemption_signal,
    run_duration_s,
    runs,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    Capacity,
    Correlation,
    Episode,
    Evidence,
    LimitFinding,
    LimitName,
    Preemptions,
    Verdict,
    VerdictState,
    Window,
)
from preemptscope.analysis.windows import LIMIT_BUDGET, LIMIT_KV, LIMIT_SEQS

# vLLM's order of the limits (its optimization guide starts from preemption): the tie-break.
LIMIT_ORDER: tuple[LimitName, ...] = (LIMIT_KV, LIMIT_SEQS, LIMIT_BUDGET)

QUALITY_WORDS = {
    "exact": "exact",
    "lower_bound": "lower bound",
    "inferred": "inferred",
    "none": "no count",
}


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _lasting(seconds: float) -> str:
    return "one record (no duration)" if seconds < 1 else f"{_duration(seconds)} by its records"


def _hhmm(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def decide(
    windows: Sequence[Window],
    episodes: Sequence[Episode],
    correlation: Correlation,
    preemptions: Preemptions,
    capacity: Capacity,
    params: AnalysisParams,
    now: datetime | None,
    no_count_reason: str = "nothing in them counts preemptions",
    *,
    max_num_seqs_inferred: int | None = None,
) -> Verdict:
    samples = sum(w.samples for w in windows)
    data = [w for w in windows if w.samples > 0 or w.latency]
    active = [w for w in data if not w.idle]
    # Preemptions placed in the data (a lifetime counter alone is history, not evidence of now).
    counted = (preemptions.total or 0) > 0
    evidence: list[Evidence] = []

    over = [w for w in windows if w.over_capacity]
    if samples < params.min_samples and not counted and not over:
        evidence.append(
            Evidence(
                "samples",
                f"only {samples} stats record(s) / scrape(s); at least {params.min_samples} "
                "are needed to judge",
                float(samples),
            )
        )
        evidence += _preemption_evidence(preemptions, no_count_reason)
        evidence += _window_evidence(windows, preemptions)
        finding = LimitFinding(
            reason=f"too little data to tell which limit binds ({samples} stats record(s) / "
            f"scrape(s), at least {params.min_samples} needed)"
        )
        return Verdict("insufficient_data", evidence, "unknown", "unknown", finding)

    evidence += _preemption_evidence(preemptions, no_count_reason)
    evidence += _window_evidence(windows, preemptions)
    evidence += _queue_evidence(active, params)
    evidence += _latency_evidence(correlation, params)
    if len(data) > len(active):
        evidence.append(
            Evidence(
                "idle",
                f"{len(data) - len(active)} of {len(data)} windows idle (not judged)",
                float(len(data) - len(active)),
            )
        )

    sustained = [e for e in episodes if episode_duration_s(e) >= params.min_episode_s]
    current = [
        e for e in sustained if now is None or (now - e.end).total_seconds() <= params.stale_after_s
    ]
    recent_over = [
        w for w in over if now is None or (now - w.end).total_seconds() <= params.stale_after_s
    ]
    if episodes:
        longest = max(episodes, key=episode_duration_s)
        evidence.append(
            Evidence(
                "episodes",
                f"{len(episodes)} over-capacity episode(s) covering {len(over)} window(s); "
                f"longest {_lasting(episode_duration_s(longest))}, from "
                f"{_hhmm(longest.evidence_start or longest.start)} to "
                f"{_hhmm(longest.evidence_end or longest.end)}"
                + _why_not_current(longest, bool(current), params),
                float(len(episodes)),
            )
        )
    if over and now is not None:
        age = max((now - over[-1].end).total_seconds(), 0.0)
        message = (
            f"last over-capacity window ended {_duration(age)} before the end of the data "
            f"({_hhmm(now)})"
            if age > 0
            else f"the data ends inside an over-capacity window ({_hhmm(now)})"
        )
        evidence.append(Evidence("last_over_capacity", message, age))

    kv_high_fraction = (
        sum(1 for w in active if (w.kv_usage_max or 0) >= params.kv_high) / len(active)
        if active
        else 0.0
    )
    saturated_runs = runs(windows, lambda w: w.queue_bound, params)
    queued = [
        r
        for r in saturated_runs
        if run_duration_s(r) >= params.min_episode_s
        and (now is None or (now - r[-1].end).total_seconds() <= params.stale_after_s)
    ]
    recent_saturated = [
        w
        for w in windows
        if w.queue_bound and (now is None or (now - w.end).total_seconds() <= params.stale_after_s)
    ]
    if queued:
        evidence.append(_queue_run_evidence(max(queued, key=run_duration_s), params))
    elif recent_saturated:
        widest = max(saturated_runs, key=run_duration_s)
        evidence.append(_queue_run_evidence(widest, params, sustained=False))
    kv_trouble = bool(sustained or recent_over or kv_high_fraction >= params.at_risk_kv_fraction)
    state: VerdictState
    if current or queued:
        state = "over_capacity"
    elif kv_trouble or recent_saturated:
        state = "at_risk"
    elif not data and counted:
        # Preemptions were counted but nothing tells when (warnings without timestamps).
        state = "at_risk"
    else:
        state = "ok"
    if state == "ok" and over:
        evidence.append(
            Evidence(
                "isolated_history",
                f"{len(over)} isolated over-capacity window(s), the last at "
                f"{_hhmm(over[-1].start)}, more than {_duration(params.stale_after_s)} before "
                "the end of the data and not sustained: not over capacity now",
                float(len(over)),
            )
        )
    limit, finding = find_limit(
        windows, capacity, params, max_num_seqs_inferred=max_num_seqs_inferred
    )
    if limit not in ("none", "unknown") or (finding.flagged_windows and limit == "unknown"):
        evidence.append(limit_evidence(limit, finding))
    problem = _problem(state, windows, correlation, capacity, params, limit)
    if problem == "ordering":
        evidence.append(_ordering_evidence(windows, correlation, params))
    return Verdict(state, evidence, problem, limit, finding)


def find_limit(
    windows: Sequence[Window],
    capacity: Capacity,
    params: AnalysisParams,
    *,
    max_num_seqs_inferred: int | None = None,
) -> tuple[LimitName, LimitFinding]:
    """Which limit held requests back in the flagged windows, measured from the windows.

    Flagged: over capacity (preemption, or a queue at full KV) or saturated (a persistent
    queue with a limit pinned). A limit binds when it held requests back in at least
    limit_share of them; the one in most windows comes first (vLLM's order on a tie).
    """
    cap = capacity.max_num_seqs or max_num_seqs_inferred
    source: Literal["log", "inferred", "none"] = (
        "log" if capacity.max_num_seqs else "inferred" if max_num_seqs_inferred else "none"
    )
    # A window whose only record is a preemption is active too: vLLM preempts only when the
    # KV cache cannot hold the running requests, so that alone says which limit bound.
    active = [w for w in windows if not w.idle and (w.samples > 0 or w.latency or w.preemptions)]
    flagged = [w for w in active if w.over_capacity or w.queue_bound]
    counts = {name: sum(1 for w in flagged if name in w.limits) for name in LIMIT_ORDER}
    binding: list[LimitName] = sorted(
        (n for n, c in counts.items() if c and c >= params.limit_share * len(flagged)),
        key=lambda n: (-counts[n], LIMIT_ORDER.index(n)),
    )
    pool = flagged or active
    running = [w.running_max for w in pool if w.running_max is not None]
    waiting = [w.waiting_max for w in pool if w.waiting_max is not None]
    kv = [w.kv_usage_max for w in pool if w.kv_usage_max is not None]
    steps = [w for w in pool if w.tokens_per_step is not None]
    busiest = max(steps, key=lambda w: w.tokens_per_step or 0.0) if steps else None
    base = LimitFinding(
        reason="",
        windows={n: c for n, c in counts.items() if c},
        flagged_windows=len(flagged),
        max_num_seqs=cap,
        max_num_seqs_source=source,
        max_num_batched_tokens=capacity.max_num_batched_tokens,
        peak_running=max(running) if running else None,
        peak_waiting=max(waiting) if waiting else None,
        peak_kv_usage=max(kv) if kv else None,
        tokens_per_step=round(busiest.tokens_per_step or 0.0, 1) if busiest else None,
        tokens_per_step_source=busiest.tokens_per_step_source if busiest else None,
    )
    if binding:
        finding = dataclasses.replace(base, also=[str(n) for n in binding[1:]])
        return binding[0], dataclasses.replace(
            finding,
            reason=limit_sentence(binding[0], finding),
        )
    if flagged:
        budget = (
            f"max_num_batched_tokens is not printed (steps scheduled about "
            f"{base.tokens_per_step:.0f} tokens)"
            if base.tokens_per_step is not None and capacity.max_num_batched_tokens is None
            else "the token budget cannot be measured (no throughput figures)"
        )
        why = (
            "requests queued with KV to spare, but max_num_seqs is not printed and the running "
            f"count shows no plateau, and {budget}"
            if cap is None
            else f"requests queued with the batch below its cap of {cap} and KV to spare, and "
            f"{budget}"
        )
        return "unknown", dataclasses.replace(
            base, reason=f"the data cannot tell which limit binds: {why}"
        )
    if not active or not (running or waiting):
        return "unknown", dataclasses.replace(
            base,
            reason="the inputs show no running or waiting counts (stats lines or /metrics "
            "gauges), so no limit can be measured",
        )
    kv_peak = f" (KV peak {_pct(max(kv))})" if kv else ""
    return "none", dataclasses.replace(
        base,
        reason=f"nothing held requests back: no preemption and no persistent queue in "
        f"{len(active)} active window(s){kv_peak}",
    )


def limit_sentence(limit: LimitName, f: LimitFinding) -> str:
    """The plain sentence for verdict.limit, from the finding's own figures."""
    if limit in ("none", "unknown"):
        return f.reason
    share = f"in {f.windows.get(limit, 0)} of {f.flagged_windows} flagged window(s)"
    queue = f"up to {f.peak_waiting} waiting" if f.peak_waiting is not None else "a queue"
    kv = f", KV peak {_pct(f.peak_kv_usage)}" if f.peak_kv_usage is not None else ""
    if limit == LIMIT_KV:
        text = f"the KV cache binds {share}: preemption or a queue with KV near full{kv}"
    elif limit == LIMIT_SEQS:
        how = "printed" if f.max_num_seqs_source == "log" else "inferred from a plateau"
        text = (
            f"max_num_seqs binds {share}: running held at {f.peak_running} of a cap of "
            f"{f.max_num_seqs} ({how}) with {queue}{kv}"
        )
    else:
        budget = (
            f"of a {f.max_num_batched_tokens}-token budget"
            if f.max_num_batched_tokens is not None
            else "(budget not printed; slots and KV were free)"
        )
        how = (
            "vllm:iteration_tokens_total"
            if f.tokens_per_step_source == "iteration_tokens"
            else "estimated from the stats lines"
        )
        steps = (
            f"steps scheduled about {f.tokens_per_step:.0f} tokens on average ({how}) {budget}"
            if f.tokens_per_step is not None
            else f"requests waited with slots and KV free {budget}"
        )
        text = f"max_num_batched_tokens binds {share}: {steps}, with {queue}{kv}"
    if f.also:
        text += "; also binding: " + ", ".join(f.also)
    return text


def limit_line(verdict: Verdict) -> str | None:
    """'Limit: <name>: <sentence>' for the terminal, the HTML report and the live pages."""
    f = verdict.limit_detail
    if f is None or not f.reason:
        return None
    if verdict.limit in ("none", "unknown"):
        return f"Limit: {verdict.limit}: {f.reason}"
    return f"Limit: {f.reason}"


def limit_evidence(limit: LimitName, f: LimitFinding) -> Evidence:
    quotes: dict[str, float | int | str | None] = {"verdict.limit": limit}
    # The figures limit_sentence writes for this limit, as the JSON holds them.
    said = {
        LIMIT_SEQS: ("max_num_seqs", "peak_running", "peak_waiting"),
        LIMIT_BUDGET: ("max_num_batched_tokens", "tokens_per_step", "peak_waiting"),
    }.get(limit, ())
    for name in said:
        value = getattr(f, name)
        if value is not None:
            quotes[f"verdict.limit_detail.{name}"] = value
    return Evidence("limit", f"limit: {f.reason}", None, quotes)


def settle_limit(verdict: Verdict, relief: dict[str, float | None], *, verified: bool) -> Verdict:
    """When two limits bind, the one whose relief the replay says helps most comes first.

    `relief`: predicted e2e p99 when each binding limit is doubled (None: not replayed).
    Only a replay that reproduces now (`verified`, analysis/sim/fidelity.py) reorders them;
    otherwise the limit in most flagged windows stays first.
    """
    f = verdict.limit_detail
    if f is None or verdict.limit in ("none", "unknown") or not f.also:
        return verdict
    binding = [verdict.limit, *f.also]
    known = {n: relief.get(n) for n in binding}
    if not verified or any(v is None for v in known.values()):
        return dataclasses.replace(
            verdict, limit_detail=dataclasses.replace(f, relief_e2e_p99=known)
        )
    order = sorted(binding, key=lambda n: (known[n], LIMIT_ORDER.index(n)))
    first: LimitName = order[0]  # type: ignore[assignment]
    settled = dataclasses.replace(f, also=order[1:], relief_e2e_p99=known)
    settled = dataclasses.replace(settled, reason=limit_sentence(first, settled))
    evidence = [
        limit_evidence(first, settled) if e.code == "limit" else e for e in verdict.evidence
    ]
    problem = verdict.problem
    if problem in ("capacity", "throughput"):
        problem = "capacity" if first == LIMIT_KV else "throughput"
    return dataclasses.replace(
        verdict, limit=first, limit_detail=settled, evidence=evidence, problem=problem
    )


def _why_not_current(longest: Episode, current: bool, params: AnalysisParams) -> str:
    if current:
        return ""
    if episode_duration_s(longest) < params.min_episode_s:
        return f" (shorter than the {_duration(params.min_episode_s)} an episode needs)"
    return (
        f" (all sustained episodes ended more than {_duration(params.stale_after_s)} before "
        "the end of the data)"
    )


def _ordering_evidence(
    windows: Sequence[Window], correlation: Correlation, params: AnalysisParams
) -> Evidence:
    preempting = [w for w in windows if (preemption_signal(w) or 0) > 0]
    full = sum(1 for w in preempting if (w.kv_usage_max or 0) >= params.kv_saturated)
    ratio = _mean_ratio(correlation)
    mean = (
        f"; mean latency {ratio:.2f}x that of quiet windows (the loss lands on few requests)"
        if ratio is not None
        else ""
    )
    return Evidence(
        "ordering",
        f"scheduling_policy=priority and KV >= {_pct(params.kv_saturated)} in only {full} of "
        f"{len(preempting)} preempting windows{mean}: priority decides who loses more than "
        "capacity decides how much is lost",
        float(full) / len(preempting) if preempting else None,
    )


def queue_grows(run: Sequence[Window], params: AnalysisParams) -> bool:
    """Waiting at the end of the run is queue_growth x (at least) what it was at the start."""
    first = run[0].waiting_mean or 0.0
    last = run[-1].waiting_mean or 0.0
    return last >= params.queue_growth * max(first, 1.0)


def _queue_run_evidence(
    run: Sequence[Window], params: AnalysisParams, *, sustained: bool = True
) -> Evidence:
    kv = [w.kv_usage_max for w in run if w.kv_usage_max is not None]
    peak = f"; peak KV {_pct(max(kv))}" if kv else ""
    first, last = run[0].waiting_mean or 0.0, run[-1].waiting_mean or 0.0
    running = [w.running_max for w in run if w.running_max is not None]
    held = f", up to {max(running)} running" if running else ""
    short = (
        ""
        if sustained
        else f" (shorter than the {_duration(params.min_episode_s)} an episode needs)"
    )
    grows = " (it grew: demand above the service rate)" if queue_grows(run, params) else ""
    return Evidence(
        "queue_bound",
        f"requests queued for {_duration(run_duration_s(run))} from {_hhmm(run[0].start)}"
        f"{short} with a limit pinned{held}{peak}; mean waiting went from {first:.0f} to "
        f"{last:.0f}{grows}",
        last,
    )


def _preemption_evidence(preemptions: Preemptions, no_count_reason: str) -> list[Evidence]:
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


def _window_evidence(windows: Sequence[Window], preemptions: Preemptions) -> list[Evidence]:
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


def _queue_evidence(active: Sequence[Window], params: AnalysisParams) -> list[Evidence]:
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
                f"KV cache >= {_pct(params.kv_saturated)} in {saturated} of {len(kv_known)} active "
                f"windows ({_pct(saturated / len(kv_known))}); peak {_pct(peak)}",
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
                f"({_pct(queued / len(waiting_known))}); peak {peak_wait}",
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


def _latency_evidence(c: Correlation, params: AnalysisParams) -> list[Evidence]:
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
                    f"{c.metric} p99 {_seconds(c.p99_with)} in windows with preemption vs "
                    f"{_seconds(c.p99_without)} in quiet windows (medians)",
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
    out += _rho_evidence(c, params)
    return out


def _rho_evidence(c: Correlation, params: AnalysisParams) -> list[Evidence]:
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


def _problem(
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
    mean_ratio = _mean_ratio(correlation)
    if preempting and not mostly_full and (mean_ratio is None or mean_ratio <= 1.25):
        return "ordering"
    return "capacity"


def _mean_ratio(c: Correlation) -> float | None:
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
