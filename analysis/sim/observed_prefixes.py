"""The replayed workload's shared prefixes, from the data: the log's prompt block hashes where
it shows prompt ids, else the prefix-cache hit rate the counters give.

Owns reading the hashes from the request-path frames and lining them up with the replayed
requests (the log's own arrivals, or client rows by start time and prompt length), and the
prefix a hit rate implies. Never replays: observed.build_replay calls these and states the
replay's own hit rate beside the observed one (hit_rate_note). Pure: frames in.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import polars as pl
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.prefixes import (
    MAX_HASHED_BLOCKS,
    IntArray,
    hashed_prefixes,
    prompt_lengths,
)
from preemptscope.analysis.sim.workload import Workload

__all__ = [
    "PROMPT_HASHES",
    "PROMPT_SHOWN",
    "hashes_for",
    "hashes_for_rows",
    "log_prompt_hashes",
    "prefix_hit_rate",
    "with_hashed_prefixes",
    "with_shared_prefix",
]


PROMPT_HASHES = "prompt_block_hashes"  # ingest's per-request column (ARRIVALS, JOINED)
# Beside it: how many ids the line showed, and whether the list was cut (then only a bound).
PROMPT_SHOWN = ("prompt_tokens", "prompt_cut")


def log_prompt_hashes(
    logs: Sequence[Any], *, until: Any = None, keep: int | None = None
) -> pl.DataFrame | None:
    """(timestamp, prompt_block_hashes) of the logged requests, sorted by time, from the
    request-path frames (a reduced log's ARRIVALS and JOINED; the others' request rows joined
    with their prompts, as the reducer joins them); None when no request has hashes.

    `until`, `keep`: only the last `keep` requests started by `until` (the replay's tail: up
    to 256 hashes a request, a long log's are not copied whole)."""
    from preemptscope.ingest.lifecycle import RequestJoin
    from preemptscope.ingest.schema import PROMPT_COLUMNS

    shows = [lf.prompts is not None and lf.prompts.height for lf in logs if not lf.reduced]
    reduced = [f for lf in logs for f in (lf.arrivals, lf.joined) if f is not None and f.height]
    if not any(shows) and not any(PROMPT_HASHES in f.columns for f in reduced):
        return None
    pairs: list[tuple[pl.DataFrame | None, str]] = []
    for lf in logs:
        pairs += [(lf.arrivals, "timestamp"), (lf.joined, "start")]
        if not lf.reduced and lf["requests"].height:
            # Each file's lines with its own prompts (their line numbers are the file's).
            join = RequestJoin()
            ordered = lf["requests"].sort("timestamp", "line")
            for arrived, joined in (join.add(ordered, lf.prompts), join.close()):
                pairs += [(arrived, "timestamp"), (joined, "start")]
    parts = []
    for frame, column in pairs:
        if frame is None or not frame.height:
            continue
        # A file that showed no ids still holds requests: null hashes keep their places, so
        # the hashes line up with the arrivals (log_arrivals takes every file's).
        rows = frame.lazy().select(
            pl.col(column).alias("timestamp"),
            *(
                pl.col(c) if c in frame.columns else pl.lit(None, PROMPT_COLUMNS[c]).alias(c)
                for c in (PROMPT_HASHES, *PROMPT_SHOWN)
            ),
        )
        if until is not None:
            rows = rows.filter(pl.col("timestamp") <= until)
        if keep is not None:
            rows = rows.sort("timestamp", maintain_order=True).tail(keep)
        parts.append(rows.collect())
    if not parts:
        return None
    found = pl.concat(parts, how="vertical_relaxed").sort("timestamp", maintain_order=True)
    if keep is not None:
        found = found.tail(keep)
    return found if found[PROMPT_HASHES].null_count() < found.height else None


def hashes_for(
    frame: pl.DataFrame | None, stats: pl.DataFrame, count: int, assumptions: list[str]
) -> tuple[list[list[int] | None], IntArray] | None:
    """The prompt block hashes of the replayed requests, the last `count` logged in the stats'
    span as observed_load takes their arrivals, and each one's prompt length where the log
    showed all its ids (-1 elsewhere). None: no hashes, or they do not line up."""
    if frame is None:
        return None
    times = stats.filter(pl.col("timestamp").is_not_null())["timestamp"]
    first, last = times.min(), times.max()
    inside = frame.filter(pl.col("timestamp").is_between(first, last))
    if inside.height < count:
        assumptions.append(
            f"the log's prompt block hashes cover {inside.height:,} of the {count:,} requests "
            "replayed: shared prefixes from the hit rate"
        )
        return None
    rows = inside.tail(count)
    hashes: list[list[int] | None] = rows[PROMPT_HASHES].to_list()
    if not any(h is not None for h in hashes):
        return None
    exact = np.full(count, -1, dtype=np.int64)
    if all(c in rows.columns for c in PROMPT_SHOWN):
        whole = rows["prompt_tokens"].is_not_null() & rows["prompt_cut"].eq(False)
        exact = np.where(whole.to_numpy(), rows["prompt_tokens"].fill_null(-1).to_numpy(), -1)
    return hashes, exact.astype(np.int64)


ROW_EARLY_S, ROW_LATE_S = 1.0, 2.0  # a log line's time beside its client row's start


def hashes_for_rows(
    frame: pl.DataFrame | None, last_start: Any, workload: Workload, assumptions: list[str]
) -> list[list[int] | None] | None:
    """The prompt block hashes of client rows (`workload`, their trace; the latest started
    at `last_start`), where each row finds one logged request of its prompt length (exact
    where the log showed every id, else to 16 tokens) logged from ROW_EARLY_S before its
    start (a log time may be the start's whole second) to ROW_LATE_S after it (the server
    logs after the client sends), the earliest one not taken. The log's request rows keep
    no ids, so times and lengths are the join (two requests of one length within the window
    may trade hashes). None: no hashes, or a row finds none (said)."""
    if frame is None or last_start is None or not len(workload):
        return None
    late = timedelta(seconds=ROW_LATE_S)
    frame = frame.filter(pl.col("timestamp") <= last_start + late)
    hashes: list[list[int] | None] = frame[PROMPT_HASHES].to_list()
    counts = np.array([-1 if h is None else len(h) for h in hashes], dtype=np.int64)
    whole = frame["prompt_tokens"].fill_null(-1).to_numpy().astype(np.int64)
    whole = np.where(frame["prompt_cut"].eq(False).fill_null(False).to_numpy(), whole, -1)
    cap = MAX_HASHED_BLOCKS
    blocks = np.where(whole > 0, np.minimum(whole // 16, cap), counts)
    end = pl.Series([last_start]).dt.epoch("us").item()
    logged = frame["timestamp"].dt.epoch("us").to_numpy()
    started = end - np.rint((workload.arrival[-1] - workload.arrival) * 1e6).astype(np.int64)
    # Per length, the logged requests in time order; rows come in start order, so a logged
    # request too early for one row is too early for every later one: dropped (linear).
    waiting: dict[int, deque[int]] = {}
    for j in np.argsort(logged, kind="stable").tolist():
        waiting.setdefault(int(blocks[j]), deque()).append(j)
    out: list[list[int] | None] = []
    missing = 0
    for i in np.argsort(started, kind="stable").tolist():
        prompt = int(workload.prompt_len[i])
        queue = waiting.get(min(prompt // 16, cap), deque())
        while queue and logged[queue[0]] < started[i] - ROW_EARLY_S * 1e6:
            queue.popleft()
        found = None
        for k, j in enumerate(queue):
            if logged[j] > started[i] + ROW_LATE_S * 1e6:
                break
            if whole[j] <= 0 or whole[j] == prompt:
                found = k
                break
        if found is None:
            missing += 1
            out.append(None)
            continue
        j = queue[found]
        del queue[found]
        out.append(hashes[j])
    if missing or all(h is None for h in out):
        assumptions.append(
            f"the log's prompt block hashes do not line up with the client rows ({missing:,} "
            f"of {len(workload):,} rows have no logged request of their length and time): "
            "shared prefixes from the hit rate"
        )
        return None
    order = np.argsort(started, kind="stable")
    lined: list[list[int] | None] = [None] * len(out)
    for i, h in zip(order.tolist(), out, strict=True):
        lined[i] = h
    return lined


def with_hashed_prefixes(
    workload: Workload,
    config: SimConfig,
    hashes: list[list[int] | None],
    exact: IntArray,
    assumptions: list[str],
) -> Workload:
    """The workload with the prompt lengths (exact where the log showed every id) and shared
    prefixes the block hashes show."""
    counts = np.array([-1 if h is None else len(h) for h in hashes], dtype=np.int64)
    bounded = prompt_lengths(np.minimum(counts, MAX_HASHED_BLOCKS), workload.prompt_len)
    lengths = np.where(exact > 0, exact, bounded).astype(np.int64)
    workload = dataclasses.replace(workload, prompt_len=lengths)
    plan = hashed_prefixes(hashes, config.block_size, lengths)
    queries = float(lengths.sum())
    known = int((exact > 0).sum())
    head = (
        f"prompt block hashes for {plan.hashed:,} of {len(workload):,} replayed requests "
        f"(prompt lengths exact for {known:,} whose ids the log showed whole, to 16 tokens "
        "for the others hashed)"
    )
    if not config.enable_prefix_caching:
        assumptions.append(f"{head}; prefix caching is off in the server's args: no sharing")
        return dataclasses.replace(
            workload,
            prefix_group=np.full(len(workload), -1, dtype=np.int64),
            prefix_tokens=np.zeros(len(workload), dtype=np.int64),
            prefix_parent=None,
            prefix_node_tokens=None,
        )
    longest = int(plan.tokens.max()) if len(plan.tokens) else 0
    roots = int((plan.parent < 0).sum())
    nested = plan.groups - roots
    assumptions.append(
        f"{head}: {roots:,} shared prefix{'es' if roots != 1 else ''}"
        + (f" and {nested:,} nested in them" if nested else "")
        + f", up to {longest:,} tokens ({plan.grouped:,} requests) at block size "
        f"{config.block_size}, {plan.saved_tokens / queries:.0%} of prompt tokens if every "
        "later request hits its whole prefix"
    )
    return workload.with_prefix(plan.group, plan.tokens, plan.parent, plan.node_tokens)


def with_shared_prefix(
    workload: Workload, config: SimConfig, hit_rate: float | None, assumptions: list[str]
) -> Workload:
    """The workload with the shared prefix the observed prefix-cache hit rate implies.

    vLLM counts, for each request's first admission, its prompt tokens (queries) and those
    found in full cached blocks (hits). With one prefix of k blocks shared by every prompt
    longer than it, each such request but the first hits k x block_size tokens: the k whose
    hit rate comes nearest the observed one is the prefix replayed (the replay then shares
    its blocks as vLLM does, and says so when its own hit rate differs).
    """
    if not config.enable_prefix_caching:
        if hit_rate:
            assumptions.append(
                f"prefix caching is off in the server's args, yet a hit rate of {hit_rate:.0%} "
                "was counted: replayed without sharing"
            )
        return workload
    if hit_rate is None or hit_rate <= 0:
        return workload
    bs = config.block_size
    prompt = np.sort(workload.prompt_len)
    queries = float(prompt.sum())
    k = np.arange(int(prompt[-1] - 1) // bs + 1, dtype=np.int64)
    members = len(prompt) - np.searchsorted(prompt, k * bs, side="right")  # prompts > k blocks
    rates = np.maximum(members - 1, 0) * k * bs / queries
    best = int(np.argmin(np.abs(rates - hit_rate)))
    tokens = best * bs
    if best == 0:
        assumptions.append(
            f"a prefix-cache hit rate of {hit_rate:.1%} implies no shared block: none replayed"
        )
        return workload
    group = np.where(workload.prompt_len > tokens, 0, -1).astype(np.int64)
    assumptions.append(
        f"prefix-cache hit rate {hit_rate:.0%}: replayed as one {tokens:,}-token prefix shared "
        f"by {int((group == 0).sum()):,} of {len(workload):,} prompts (hit rate "
        f"{float(rates[best]):.0%} if every later one hits it; prefixes inferred from the "
        "counters, not from token ids)"
    )
    return workload.with_prefix(group, np.where(group == 0, tokens, 0).astype(np.int64))


def prefix_hit_rate(metrics: pl.DataFrame | None, stats: pl.DataFrame | None) -> float | None:
    """Prefix-cache hits / queries over the data (/metrics counters, else the stats lines)."""
    if metrics is not None and not metrics.is_empty():
        totals = []
        for name in ("prefix_cache_hits", "prefix_cache_queries"):
            rows = metrics.filter(pl.col("metric") == name)
            if rows.is_empty():
                break
            by_time = rows.group_by("timestamp").agg(pl.col("value").sum()).sort("timestamp")
            values = by_time["value"].to_numpy()
            totals.append(float(values[-1] - values[0]) if len(values) > 1 else 0.0)
        if len(totals) == 2 and totals[1] > 0:
            return totals[0] / totals[1]
    if stats is not None and "prefix_cache_hit_rate" in stats.columns:
        rates = stats.filter(pl.col("running") > 0)["prefix_cache_hit_rate"].drop_nulls()
        if len(rates):
            return float(rates.mean())  # type: ignore[arg-type]  # a fraction (frames.md)
    return None
