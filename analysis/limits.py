"""Which of the scheduler's limits held requests back: KV cache, max_num_seqs or the token budget.

Owns `find_limit` (from the flagged windows) and `settle_limit` (when two bind, the replay of
the advice decides), and the limit's one line for people. It never changes a verdict's state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from preemptscope.analysis.evidence import say_pct
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    Capacity,
    Evidence,
    LimitFinding,
    LimitName,
    Verdict,
    Window,
)
from preemptscope.analysis.windows import LIMIT_BUDGET, LIMIT_KV, LIMIT_SEQS

# vLLM's order of the limits (its optimization guide starts from preemption): the tie-break.
LIMIT_ORDER: tuple[LimitName, ...] = (LIMIT_KV, LIMIT_SEQS, LIMIT_BUDGET)


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
    kv_peak = f" (KV peak {say_pct(max(kv))})" if kv else ""
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
    kv = f", KV peak {say_pct(f.peak_kv_usage)}" if f.peak_kv_usage is not None else ""
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
