"""Properties of the counter and histogram window math over random scrape histories."""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl
from hypothesis import example, given, settings
from hypothesis import strategies as st
from preemptscope.analysis.latency import (
    bucket_quantile,
    counter_increases,
    histogram_windows_stats,
)
from preemptscope.ingest.schema import METRIC_SAMPLES

from .helpers import T0, at

# (increment since the previous scrape, restarted before this scrape)
steps = st.lists(
    st.tuples(st.integers(min_value=0, max_value=50), st.booleans()), min_size=2, max_size=40
)


def _counter_frame(values: list[float], created: list[float] | None) -> pl.DataFrame:
    rows = []
    for i, value in enumerate(values):
        base = {
            "timestamp": at(10 * i),
            "source": "s",
            "deployment": "d",
            "metric": "num_preemptions",
            "raw_name": "vllm:num_preemptions_total",
            "type": "counter",
            "le": None,
            "model_name": "m",
            "engine": "0",
            "labels": "{}",
        }
        rows.append({**base, "sample": "value", "value": value})
        if created is not None:
            rows.append({**base, "sample": "created", "value": created[i]})
    return pl.DataFrame(rows, schema=METRIC_SAMPLES)


def _history(history: list[tuple[int, bool]]) -> tuple[list[float], list[float], int]:
    """Counter values and created stamps of a process restarting when told; true increase."""
    values: list[float] = []
    created: list[float] = []
    value, born, total = 0.0, 1.0, 0
    for index, (increment, restart) in enumerate(history):
        if index and restart:
            value, born = 0.0, born + 1  # a new process counts from zero
        value += increment
        if index:
            total += increment
        values.append(value)
        created.append(born)
    return values, created, total


@settings(max_examples=60, deadline=None)
@given(steps, st.integers(min_value=5, max_value=60))
def test_tiled_windows_count_every_increase_once(
    history: list[tuple[int, bool]], width: int
) -> None:
    values, created, total = _history(history)
    span = 10 * len(values)
    windows = [(at(s), at(s + width)) for s in range(-width, span + width, width)]
    with_created = counter_increases(_counter_frame(values, created), "num_preemptions", windows)
    assert sum(v for v in with_created if v is not None) == total
    assert all(v is None or v >= 0 for v in with_created)
    # Without _created a restart that already passed the old value is seen as growth:
    # never negative, never more than the truth.
    plain = counter_increases(_counter_frame(values, None), "num_preemptions", windows)
    assert 0 <= sum(v for v in plain if v is not None) <= total
    assert [v is None for v in plain] == [v is None for v in with_created]


bucket_counts = st.lists(st.integers(min_value=0, max_value=30), min_size=2, max_size=8)


@settings(max_examples=80, deadline=None)
@given(bucket_counts, st.one_of(st.sampled_from([0.0, 0.5, 0.99, 1.0]), st.floats(0.0, 1.0)))
@example([0, 5], 0.0)
def test_quantile_is_monotone_and_inside_its_bucket(counts: list[int], q: float) -> None:
    bounds = [0.1 * 2**i for i in range(len(counts) - 1)] + [math.inf]
    cumulative = [float(sum(counts[: i + 1])) for i in range(len(counts))]
    value, limited = bucket_quantile(q, bounds, cumulative)
    if cumulative[-1] == 0:
        assert value is None
        return
    assert value is not None
    assert 0 <= value <= bounds[-2] if len(bounds) > 1 else True
    higher, _ = bucket_quantile(min(1.0, q + 0.05), bounds, cumulative)
    assert higher is not None and higher >= value - 1e-12
    if not limited:
        assert bounds[0] <= value <= bounds[-2]


@settings(max_examples=30, deadline=None)
@given(st.lists(bucket_counts.filter(lambda c: len(c) == 4), min_size=2, max_size=8))
def test_histogram_windows_add_up_to_the_whole(increments: list[list[int]]) -> None:
    bounds = ["0.5", "1.0", "2.0", "+Inf"]
    rows: list[tuple[str, float | None, float, int]] = []
    cumulative = [0, 0, 0, 0]
    for i, step in enumerate(increments):
        running = 0
        for j, count in enumerate(step):
            running += count
            cumulative[j] += running
        for le, value in zip(bounds, cumulative, strict=True):
            rows.append(("bucket", float(le.replace("+Inf", "inf")), float(value), i))
        rows.append(("count", None, float(cumulative[-1]), i))
        rows.append(("sum", None, float(cumulative[-1]) * 0.7, i))
    frame = pl.DataFrame(
        {
            "timestamp": [T0 + timedelta(seconds=10 * r[3]) for r in rows],
            "source": "s",
            "deployment": "d",
            "metric": "e2e_request_latency_seconds",
            "raw_name": "x",
            "type": "histogram",
            "sample": [r[0] for r in rows],
            "le": [r[1] for r in rows],
            "model_name": "m",
            "engine": "0",
            "labels": "{}",
            "value": [r[2] for r in rows],
        },
        schema=METRIC_SAMPLES,
    )
    span = 10 * len(increments)
    windows = [(at(s), at(s + 20)) for s in range(0, span, 20)]
    parts = histogram_windows_stats(frame, "e2e", windows)
    whole = histogram_windows_stats(frame, "e2e", [(at(0), at(span))])[0]
    counted = sum(p.count for p in parts if p is not None)
    assert counted == (whole.count if whole is not None else 0)
    assert counted == cumulative[-1] - sum(increments[0])
    for part in parts:
        if part is not None:
            assert part.mean is not None and math.isclose(part.mean, 0.7)
            assert part.p50 is not None and part.p90 is not None and part.p99 is not None
            assert part.p50 <= part.p90 <= part.p99
