"""Restarts and configuration changes of one deployment, found in its logs and /metrics.

A vLLM restart shows in three ways, each with its own precision:

* a second startup (a `vllm_version` setting from a version or engine-config line) in a log
  after that log already had records: the time of the startup line (exact);
* a /metrics counter (num_preemptions, request_success, prompt/generation tokens) that goes
  down, or whose `_created` sample changes (analysis/latency.py's reset rule): somewhere
  between the previous scrape and this one;
* a V0 cumulative preemption counter that goes down: between the previous warning and this one.

One restart seen several ways is one event: a reset whose interval holds an already known restart
is that restart. Config changes are settings of the `config` frame whose value changes over time
(compared per key and per kind of line, so "auto" in the arguments and "torch.bfloat16" in the
engine config are not a change). Pure and vectorised: Polars over the (small) config frame and the
counters' samples; Python loops only over startups and resets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.report import Event

__all__ = ["RESTART_COUNTERS", "clean_setting", "find_events"]

# Counters every vLLM process starts from zero: one of them going down is a restart.
RESTART_COUNTERS = ("num_preemptions", "request_success", "prompt_tokens", "generation_tokens")
ARROW = "→"


def clean_setting(value: Any) -> str | None:
    """A setting as printed, without quotes; a one-element list is its element; None if unset."""
    if value is None:
        return None
    text = str(value).strip().strip("'\"")
    if text.startswith("[") and text.endswith("]"):
        try:
            items = json.loads(text.replace("'", '"'))
            text = str(items[0]) if items else ""
        except (ValueError, IndexError):
            pass
    return None if text in ("", "None", "null") else text


@dataclass(frozen=True)
class _Reset:
    """A restart known only to lie in (after, at]."""

    after: datetime | None
    at: datetime
    message: str


def find_events(
    *,
    config: pl.DataFrame,
    warnings: pl.DataFrame,
    activity: Sequence[pl.DataFrame],
    metrics: pl.DataFrame | None,
    span: tuple[datetime, datetime] | None = None,
) -> list[Event]:
    """Restarts and config changes, sorted by time, without duplicates.

    `config` (CONFIG rows), `warnings` (PREEMPTION_WARNING) and `activity` (frames with `source`
    and `line`: stats, requests, ...) are the deployment's log frames; `metrics` its /metrics
    samples. With `span` (first window start, last window end), events outside it are left out
    (e.g. the live service keeps startup lines older than its history).
    """
    startups = _startup_restarts(config, activity)
    resets = [*_counter_resets(metrics), *_v0_resets(warnings)]
    known = [e.time for e in startups]
    restarts = list(startups)
    for reset in sorted(resets, key=lambda r: r.at):
        if any((reset.after is None or reset.after < t) and t <= reset.at for t in known):
            continue  # the same restart, already placed (more precisely or earlier)
        known.append(reset.at)
        restarts.append(Event(reset.at, "restart", reset.message))
    events = [*restarts, *_config_changes(config)]
    if span is not None:
        low, high = span
        events = [e for e in events if low <= e.time <= high]
    # At one moment a restart reads before the config change it brought.
    return sorted(set(events), key=lambda e: (e.time, e.kind != "restart", e.message))


def _startup_restarts(config: pl.DataFrame, activity: Sequence[pl.DataFrame]) -> list[Event]:
    """A startup line in a log that already had records since its previous startup."""
    markers = (
        config.filter((pl.col("key") == "vllm_version") & pl.col("timestamp").is_not_null())
        .select("source", "line", "timestamp", "value")
        .sort("source", "line")
    )
    if markers.is_empty():
        return []
    frames = [f.select("source", "line") for f in activity if f.height]
    events: list[Event] = []
    for (source,), rows in markers.group_by(["source"], maintain_order=True):
        marks = rows["line"].to_numpy()
        # Records between consecutive startup lines of this log (no sort of the records: each
        # is binned among the few startup lines). A startup after new records is a restart.
        seen = np.zeros(len(marks) + 1, dtype=bool)
        for frame in frames:
            lines = frame.filter(pl.col("source") == source)["line"].drop_nulls().to_numpy()
            if len(lines):
                seen |= np.bincount(np.searchsorted(marks, lines), minlength=len(marks) + 1) > 0
        for i in np.flatnonzero(seen[:-1]):
            version = clean_setting(rows["value"][int(i)])
            events.append(
                Event(
                    rows["timestamp"][int(i)],
                    "restart",
                    f"vLLM restarted: a new startup in {source}"
                    + (f" (vLLM {version})" if version else ""),
                )
            )
    return events


def _counter_resets(metrics: pl.DataFrame | None) -> list[_Reset]:
    """Scrapes where a counter went down or its `_created` changed (latency.py's reset rule)."""
    if metrics is None or metrics.is_empty():
        return []
    # One pass over all samples, the counters' series told apart as analysis/latency.py does
    # (with the metric name as one more key), and its reset rule.
    keys = [*latency.SERIES_KEYS, "metric"]
    counters = metrics.filter(
        pl.col("metric").is_in(RESTART_COUNTERS) & pl.col("sample").is_in(["value", "created"])
    )
    if counters.is_empty():
        return []
    own_created = pl.when(pl.col("sample") == "created").then(pl.col("value"))
    rows = (
        counters.with_columns(series=pl.struct(keys).rank("dense"))
        .with_columns(created=own_created.max().over("series", "timestamp"))
        .filter(pl.col("sample") == "value")
        .sort("timestamp", maintain_order=True)
    )
    previous = pl.col("value").shift(1).over("series")
    reset = previous.is_not_null() & ((pl.col("value") < previous) | latency._restarted(["series"]))
    found = (
        rows.with_columns(after=pl.col("timestamp").shift(1).over("series"))
        .filter(reset)
        .select("source", "timestamp", "after", "metric")
    )
    if found.is_empty():
        return []
    grouped = (
        found.group_by("source", "timestamp")
        .agg(pl.col("after").max(), pl.col("metric").unique().sort())
        .sort("timestamp")
    )
    return [
        _Reset(
            after,
            at,
            f"vLLM restarted: /metrics counters reset ({', '.join(names)}) in {source}",
        )
        for source, at, after, names in grouped.iter_rows()
    ]


def _v0_resets(warnings: pl.DataFrame) -> list[_Reset]:
    """V0's cumulative preemption counter going down between two warnings of one log."""
    rows = warnings.filter(pl.col("timestamp").is_not_null() & pl.col("cumulative").is_not_null())
    if rows.is_empty():
        return []
    rows = (
        rows.sort("timestamp", maintain_order=True)
        .with_columns(
            before=pl.col("cumulative").shift(1).over("source"),
            after=pl.col("timestamp").shift(1).over("source"),
        )
        .filter(pl.col("cumulative") < pl.col("before"))
    )
    return [
        _Reset(
            after,
            at,
            f"vLLM restarted: the V0 preemption counter fell from {before:,} to {cum:,} "
            f"in {source}",
        )
        for source, at, after, before, cum in rows.select(
            "source", "timestamp", "after", "before", "cumulative"
        ).iter_rows()
    ]


def _config_changes(config: pl.DataFrame) -> list[Event]:
    """A setting whose value differs from its previous value on the same kind of line."""
    rows = config.filter(pl.col("timestamp").is_not_null() & pl.col("value").is_not_null())
    if rows.is_empty():
        return []
    raw = rows["value"].unique().to_list()
    cleaned = {value: clean_setting(value) for value in raw}
    rows = (
        rows.with_columns(
            clean=pl.col("value").replace_strict(cleaned, return_dtype=pl.String()),
        )
        .filter(pl.col("clean").is_not_null())
        .sort("timestamp", "source", "line", maintain_order=True)
        .with_columns(before=pl.col("clean").shift(1).over("key", "origin"))
        .filter(pl.col("before").is_not_null() & (pl.col("clean") != pl.col("before")))
    )
    events: list[Event] = []
    last: dict[str, tuple[str, str]] = {}
    for key, when, before, after in rows.select("key", "timestamp", "before", "clean").iter_rows():
        if last.get(key) == (before, after):
            continue  # the same change seen on another kind of line of the same startup
        last[key] = (before, after)
        events.append(Event(when, "config_change", f"{key} {before} {ARROW} {after}"))
    return events
