"""A long log's replay reads only what it replays: the same values as reading all of it."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.analysis.sim import workload as wl
from preemptscope.analysis.sim.whatif import ObservedLoad, observed_load, workload_from_observed
from preemptscope.analysis.sim.workload import LengthDist
from preemptscope.ingest.schema import TIMESTAMP

from preemptscope.errors import ConfigError, InputError

_DISTS = [
    LengthDist("fixed", 100.0),
    LengthDist("uniform", low=1, high=50),
    LengthDist("uniform", low=1, high=10**9),
    LengthDist("lognormal", 300.0, 0.6, 1, 1_000_000),
]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(_DISTS),
    st.integers(0, 40),
    st.integers(1, 50),
    st.integers(0, 2**32),
    st.sampled_from([2, 3, 7, wl._SAMPLE_BLOCK]),
)
def test_the_last_lengths_are_the_tail_of_all(
    dist: LengthDist, n: int, last: int, seed: int, block: int
) -> None:
    original = wl._SAMPLE_BLOCK
    wl._SAMPLE_BLOCK = block  # small blocks: many of them, and a short one at the end
    try:
        whole, tail = np.random.default_rng(seed), np.random.default_rng(seed)
        expected = dist.sample(whole, n)[max(0, n - last) :]
        got = dist.sample(tail, n, last=last)
    finally:
        wl._SAMPLE_BLOCK = original
    assert np.array_equal(got, expected)
    # The generator is left where the whole draw leaves it (the next lengths agree too).
    assert np.array_equal(dist.sample(whole, 7), dist.sample(tail, 7))


def test_an_observed_workloads_tail_is_the_whole_ones() -> None:
    load = ObservedLoad(
        duration=1_000.0,
        request_rate=5.0,
        mean_prompt_tokens=700.0,
        mean_output_tokens=150.0,
        arrivals=np.sort(np.random.default_rng(1).uniform(0, 1_000, 5_001)),
        basis="test",
    )
    whole = workload_from_observed(load, seed=3)
    tail = workload_from_observed(load, seed=3, last=1_000)
    assert len(tail) == 1_000 and tail.description == whole.description
    for name in ("arrival", "prompt_len", "output_len", "priority"):
        assert np.array_equal(getattr(tail, name), getattr(whole, name)[-1_000:])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 10_000_000), min_size=2, max_size=6, unique=True),
    st.lists(st.integers(-2_000_000, 12_000_000), max_size=80),
    st.randoms(use_true_random=False),
)
def test_sorted_arrivals_give_the_load_of_any_order(
    stats_us: list[int], arrival_us: list[int], shuffle: random.Random
) -> None:
    # Sorted arrivals (log_arrivals') take the slice path, others the filter: the same load.
    base = datetime(2026, 1, 15, 14, tzinfo=UTC)

    def moments(micros: list[int]) -> list[datetime]:
        return [base + timedelta(microseconds=m) for m in micros]

    stats = pl.DataFrame(
        {
            "timestamp": moments(sorted(stats_us)),
            "prompt_throughput": [100.0] * len(stats_us),
            "generation_throughput": [50.0] * len(stats_us),
        },
        schema={
            "timestamp": TIMESTAMP,
            "prompt_throughput": pl.Float64,
            "generation_throughput": pl.Float64,
        },
    )
    # Arrivals on the stats' first and last moments: the slice's edges.
    ordered = sorted([*arrival_us, min(stats_us), max(stats_us), max(stats_us)])
    mixed = list(ordered)
    shuffle.shuffle(mixed)
    if len(mixed) > 1 and mixed == ordered:
        mixed.reverse()
    loads: list[ObservedLoad | str] = []
    for micros in (ordered, mixed):
        series = pl.Series("timestamp", moments(micros), dtype=TIMESTAMP)
        try:
            loads.append(observed_load(stats, series, output_tokens=10.0))
        except ConfigError as exc:
            loads.append(str(exc))
    first, second = loads
    if isinstance(first, str) or isinstance(second, str):
        assert first == second
        return
    assert np.array_equal(first.arrivals, second.arrivals)
    assert dataclasses.replace(first, arrivals=second.arrivals) == second


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 5_000_000), min_size=1, max_size=300),
    st.integers(1, 400),
    st.integers(0, 9),
)
def test_a_load_kept_as_its_tail_replays_as_the_whole(
    arrival_us: list[int], last: int, seed: int
) -> None:
    # The report keeps only the arrivals it replays: the same workload as from all of them.
    base = datetime(2026, 1, 15, 14, tzinfo=UTC)
    stats = pl.DataFrame(
        {
            "timestamp": [base, base + timedelta(seconds=5)],
            "prompt_throughput": [100.0, 100.0],
            "generation_throughput": [50.0, 50.0],
        },
        schema={
            "timestamp": TIMESTAMP,
            "prompt_throughput": pl.Float64,
            "generation_throughput": pl.Float64,
        },
    )
    moments = [base + timedelta(microseconds=m) for m in sorted(arrival_us)]
    series = pl.Series("timestamp", moments, dtype=TIMESTAMP)
    whole = observed_load(stats, series)
    tail = observed_load(stats, series, keep_last=last)
    assert tail.arrival_count == whole.arrival_count == len(whole.arrivals)
    assert len(tail.arrivals) == min(last, len(whole.arrivals))
    assert dataclasses.replace(tail, arrivals=whole.arrivals, logged=None) == whole
    expected = workload_from_observed(whole, seed=seed, last=last)
    got = workload_from_observed(tail, seed=seed, last=last)
    assert got.description == expected.description
    for name in ("arrival", "prompt_len", "output_len", "priority"):
        assert np.array_equal(getattr(got, name), getattr(expected, name))


def test_a_bench_trace_keeps_its_priorities() -> None:
    from_bench_result = wl.from_bench_result
    trace = {"input_lens": [5, 6], "output_lens": [3, 4], "start_times": [1.0, 0.5]}
    assert from_bench_result(trace).priority.tolist() == [0, 0]  # none given: vLLM's default
    ranked = from_bench_result({**trace, "priorities": [1, 0]})
    assert ranked.priority.tolist() == [0, 1]  # sorted by start, priorities along
    assert ranked.prompt_len.tolist() == [6, 5]
    for bad in ([1, "x"], [1, 1.5]):
        with pytest.raises(InputError, match="`priorities` must hold integers"):
            from_bench_result({**trace, "priorities": bad})
