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

This module owns `decide`, the rules above; the evidence items are `analysis/evidence.py`'s and
the limit `analysis/limits.py`'s (both re-exported here). It reads the windows and never
computes one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from preemptscope.analysis.correlation import (
    episode_duration_s,
    run_duration_s,
    runs,
)
from preemptscope.analysis.evidence import (
    QUALITY_WORDS,
    latency_evidence,
    ordering_evidence,
    preemption_evidence,
    problem_kind,
    queue_evidence,
    queue_grows,
    queue_run_evidence,
    say_duration,
    say_hhmm,
    say_lasting,
    why_not_current,
    window_evidence,
)
from preemptscope.analysis.limits import (
    LIMIT_ORDER,
    find_limit,
    limit_evidence,
    limit_line,
    limit_sentence,
    settle_limit,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    Capacity,
    Correlation,
    Episode,
    Evidence,
    LimitFinding,
    Preemptions,
    Verdict,
    VerdictState,
    Window,
)

__all__ = [
    "LIMIT_ORDER",
    "QUALITY_WORDS",
    "decide",
    "find_limit",
    "limit_evidence",
    "limit_line",
    "limit_sentence",
    "queue_grows",
    "settle_limit",
]


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
        evidence += preemption_evidence(preemptions, no_count_reason)
        evidence += window_evidence(windows, preemptions)
        finding = LimitFinding(
            reason=f"too little data to tell which limit binds ({samples} stats record(s) / "
            f"scrape(s), at least {params.min_samples} needed)"
        )
        return Verdict("insufficient_data", evidence, "unknown", "unknown", finding)

    evidence += preemption_evidence(preemptions, no_count_reason)
    evidence += window_evidence(windows, preemptions)
    evidence += queue_evidence(active, params)
    evidence += latency_evidence(correlation, params)
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
                f"longest {say_lasting(episode_duration_s(longest))}, from "
                f"{say_hhmm(longest.evidence_start or longest.start)} to "
                f"{say_hhmm(longest.evidence_end or longest.end)}"
                + why_not_current(longest, bool(current), params),
                float(len(episodes)),
            )
        )
    if over and now is not None:
        age = max((now - over[-1].end).total_seconds(), 0.0)
        message = (
            f"last over-capacity window ended {say_duration(age)} before the end of the data "
            f"({say_hhmm(now)})"
            if age > 0
            else f"the data ends inside an over-capacity window ({say_hhmm(now)})"
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
        evidence.append(queue_run_evidence(max(queued, key=run_duration_s), params))
    elif recent_saturated:
        widest = max(saturated_runs, key=run_duration_s)
        evidence.append(queue_run_evidence(widest, params, sustained=False))
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
                f"{say_hhmm(over[-1].start)}, more than "
                f"{say_duration(params.stale_after_s)} before "
                "the end of the data and not sustained: not over capacity now",
                float(len(over)),
            )
        )
    limit, finding = find_limit(
        windows, capacity, params, max_num_seqs_inferred=max_num_seqs_inferred
    )
    if limit not in ("none", "unknown") or (finding.flagged_windows and limit == "unknown"):
        evidence.append(limit_evidence(limit, finding))
    problem = problem_kind(state, windows, correlation, capacity, params, limit)
    if problem == "ordering":
        evidence.append(ordering_evidence(windows, correlation, params))
    return Verdict(state, evidence, problem, limit, finding)
