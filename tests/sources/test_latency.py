"""Counter, gauge and latency math against hand-computed values."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.analysis.latency import (
    _placed_windows_stats,
    bucket_quantile,
    counter_increase,
    counter_increases,
    gauge_window,
    histogram_metric,
    histogram_window_stats,
    histogram_windows_counts,
    histogram_windows_stats,
    info_labels,
    samples_window_stats,
    samples_windows_stats,
)
from preemptscope.ingest.schema import REQUEST_LATENCIES

from .helpers import at, counter_lines, gauge_lines, histogram_lines, snapshots

E2E = "e2e_request_latency_seconds"
INF = math.inf


# --- bucket_quantile -------------------------------------------------------------------------


def test_quantile_interpolates_inside_buckets() -> None:
    bounds = [0.3, 0.5, 1.0, INF]
    cumulative = [10.0, 60.0, 90.0, 100.0]
    # rank 50 lies in (0.3, 0.5] holding ranks 10..60: 0.3 + 0.2 * 40/50
    assert bucket_quantile(0.5, bounds, cumulative) == pytest.approx((0.46, False))
    # rank 90 is the top of (0.5, 1.0] holding 60..90
    assert bucket_quantile(0.9, bounds, cumulative) == pytest.approx((1.0, False))


def test_quantile_in_inf_bucket_is_the_highest_finite_bound_and_flagged() -> None:
    assert bucket_quantile(0.99, [0.3, 0.5, 1.0, INF], [10, 60, 90, 100]) == (1.0, True)


def test_quantile_in_first_bucket_interpolates_from_zero_and_is_flagged() -> None:
    # vLLM's 300 ms request-latency floor: every request under 0.3 s gives p99 = 0.297.
    value, limited = bucket_quantile(0.99, [0.3, 0.5, INF], [10, 10, 10])
    assert value == pytest.approx(0.297)
    assert limited


def test_quantile_skips_empty_buckets() -> None:
    value, limited = bucket_quantile(0.99, [0.3, 0.5, 1.0, 2.5, INF], [0, 0, 50, 100, 100])
    assert value == pytest.approx(1.0 + 1.5 * 49 / 50)
    assert not limited


def test_quantile_zero_is_the_lower_edge_of_the_first_non_empty_bucket() -> None:
    assert bucket_quantile(0.0, [0.1, INF], [0, 5]) == (0.1, True)
    assert bucket_quantile(0.0, [0.1, 0.2, INF], [0, 4, 5]) == pytest.approx((0.1, False))
    assert bucket_quantile(0.0, [0.1, 0.2, INF], [3, 5, 5]) == (0.0, True)


def test_quantile_without_observations_or_inf_bucket_is_none() -> None:
    assert bucket_quantile(0.5, [0.3, INF], [0, 0]) == (None, False)
    assert bucket_quantile(0.5, [0.3, 0.5], [1, 2]) == (None, False)
    with pytest.raises(ValueError):
        bucket_quantile(1.5, [INF], [1])


# --- histograms over windows ----------------------------------------------------------------

BASELINE = {"0.3": 5, "0.5": 5, "1.0": 5, "+Inf": 5}
LATER = {"0.3": 15, "0.5": 65, "1.0": 95, "+Inf": 105}


def _two_scrapes() -> pl.DataFrame:
    return snapshots(
        [
            (0, histogram_lines("e2e_request_latency_seconds", BASELINE, 1.0, 5)),
            (60, histogram_lines("e2e_request_latency_seconds", LATER, 56.0, 105)),
        ]
    )


def test_histogram_window_uses_bucket_deltas_and_exact_mean() -> None:
    stats = histogram_window_stats(_two_scrapes(), E2E, at(0), at(60))
    assert stats is not None
    assert stats.metric == "e2e" and stats.source == "histogram"
    assert stats.count == 100
    assert stats.mean == pytest.approx(0.55)  # (56 - 1) / (105 - 5)
    assert stats.p50 == pytest.approx(0.46)
    assert stats.p90 == pytest.approx(1.0)
    assert stats.p99 == pytest.approx(1.0)
    assert stats.bucket_limited  # p99 in +Inf
    assert stats.p99_over_mean == pytest.approx(1.0 / 0.55)


def test_histogram_accepts_a_latency_kind() -> None:
    assert histogram_window_stats(_two_scrapes(), "e2e", at(0), at(60)) == histogram_window_stats(
        _two_scrapes(), E2E, at(0), at(60)
    )
    with pytest.raises(ValueError, match="unknown latency histogram"):
        histogram_window_stats(_two_scrapes(), "num_preemptions", at(0), at(60))


def test_histogram_window_without_observations_is_none() -> None:
    frame = snapshots(
        [
            (0, histogram_lines("e2e_request_latency_seconds", BASELINE, 1.0, 5)),
            (60, histogram_lines("e2e_request_latency_seconds", BASELINE, 1.0, 5)),
        ]
    )
    assert histogram_window_stats(frame, E2E, at(0), at(60)) is None
    # a window holding only the first scrape has no pair: nothing known
    assert histogram_window_stats(frame, E2E, at(-60), at(0)) is None


def test_histogram_sums_engines() -> None:
    zero = {"0.3": 0, "0.5": 0, "1.0": 0, "+Inf": 0}
    frame = snapshots(
        [
            (
                0,
                histogram_lines("e2e_request_latency_seconds", zero, 0, 0, engine="0")
                + histogram_lines("e2e_request_latency_seconds", zero, 0, 0, engine="1")[1:],
            ),
            (
                30,
                histogram_lines(
                    "e2e_request_latency_seconds",
                    {"0.3": 10, "0.5": 10, "1.0": 10, "+Inf": 10},
                    2.0,
                    10,
                    engine="0",
                )
                + histogram_lines(
                    "e2e_request_latency_seconds",
                    {"0.3": 0, "0.5": 0, "1.0": 90, "+Inf": 90},
                    63.0,
                    90,
                    engine="1",
                )[1:],
            ),
        ]
    )
    stats = histogram_window_stats(frame, E2E, at(0), at(30))
    assert stats is not None
    assert stats.count == 100
    assert stats.mean == pytest.approx(0.65)
    # merged cumulative: 10, 10, 100, 100 -> rank 50 in (0.5, 1.0]: 0.5 + 0.5 * 40/90
    assert stats.p50 == pytest.approx(0.5 + 0.5 * 40 / 90)
    assert not stats.bucket_limited


def test_histogram_restart_counts_new_values_for_all_buckets() -> None:
    frame = snapshots(
        [
            (0, histogram_lines("e2e_request_latency_seconds", LATER, 56.0, 105, created=100.0)),
            # restart: every bucket is back near zero; increase of this pair = the new values
            (
                60,
                histogram_lines(
                    "e2e_request_latency_seconds",
                    {"0.3": 0, "0.5": 2, "1.0": 4, "+Inf": 4},
                    3.0,
                    4,
                    created=200.0,
                ),
            ),
        ]
    )
    stats = histogram_window_stats(frame, E2E, at(0), at(60))
    assert stats is not None
    assert stats.count == 4
    assert stats.mean == pytest.approx(0.75)


def test_histogram_restart_detected_by_created_even_when_values_grew() -> None:
    first = {"0.3": 1, "0.5": 1, "1.0": 1, "+Inf": 1}
    grown = {"0.3": 1, "0.5": 1, "1.0": 4, "+Inf": 4}  # nothing went down, but it restarted
    frame = snapshots(
        [
            (0, histogram_lines("e2e_request_latency_seconds", first, 0.1, 1, created=100.0)),
            (60, histogram_lines("e2e_request_latency_seconds", grown, 2.4, 4, created=200.0)),
        ]
    )
    stats = histogram_window_stats(frame, E2E, at(0), at(60))
    assert stats is not None
    # deltas would say 3 observations; the new process has made 4 since it started
    assert stats.count == 4
    assert stats.mean == pytest.approx(0.6)
    same = frame.with_columns(
        value=pl.when(pl.col("sample") == "created").then(100.0).otherwise(pl.col("value"))
    )
    stats = histogram_window_stats(same, E2E, at(0), at(60))
    assert stats is not None and stats.count == 3


def test_histogram_metric_prefers_new_itl_name() -> None:
    both = snapshots(
        [
            (
                0,
                histogram_lines("inter_token_latency_seconds", BASELINE, 1, 5)
                + histogram_lines("time_per_output_token_seconds", BASELINE, 1, 5),
            )
        ]
    )
    assert histogram_metric(both, "itl") == "inter_token_latency_seconds"
    old = snapshots([(0, histogram_lines("time_per_output_token_seconds", BASELINE, 1, 5))])
    assert histogram_metric(old, "itl") == "time_per_output_token_seconds"
    assert histogram_metric(old, "tpot") is None


def test_histogram_windows_partition_the_observations() -> None:
    lines = []
    for step in range(7):
        n = step * step * 10
        buckets = {"0.3": n // 2, "0.5": n, "1.0": n, "+Inf": n}
        lines.append(
            (step * 15.0, histogram_lines("e2e_request_latency_seconds", buckets, n * 0.3, n))
        )
    frame = snapshots(lines)
    windows = [(at(i * 30), at((i + 1) * 30)) for i in range(3)]
    stats = histogram_windows_stats(frame, E2E, windows)
    counts = [s.count if s is not None else 0 for s in stats]
    assert counts == [40, 120, 200]
    assert sum(counts) == 360  # 6*6*10: the last scrape's count
    one = histogram_window_stats(frame, E2E, at(0), at(90))
    assert one is not None and one.count == 360


# --- counters ---------------------------------------------------------------------------------


def _counter_series(values: list[float], created: list[float] | None = None) -> pl.DataFrame:
    return snapshots(
        [
            (
                15.0 * i,
                counter_lines(
                    "num_preemptions", v, created=None if created is None else created[i]
                ),
            )
            for i, v in enumerate(values)
        ]
    )


def test_counter_increase_sums_consecutive_pairs() -> None:
    frame = _counter_series([100, 103, 110, 110, 150])
    assert counter_increase(frame, "num_preemptions", at(0), at(60)) == 50
    assert counter_increase(frame, "num_preemptions", at(15), at(45)) == 7
    assert counter_increase(frame, "num_preemptions", at(30), at(45)) == 0


def test_counter_reset_is_never_negative() -> None:
    frame = _counter_series([100, 120, 4, 10])  # restart between the 2nd and 3rd scrape
    increases = counter_increases(
        frame, "num_preemptions", [(at(0), at(15)), (at(15), at(30)), (at(30), at(45))]
    )
    assert increases == [20, 4, 6]


def test_counter_reset_detected_by_created_when_value_already_higher() -> None:
    frame = _counter_series([10, 12, 30], created=[1000.0, 1000.0, 2000.0])
    # restarted at the 3rd scrape and already counted 30 since: 30, not 30 - 12
    assert counter_increase(frame, "num_preemptions", at(15), at(30)) == 30


def test_counter_needs_two_scrapes() -> None:
    frame = _counter_series([5, 9])
    assert counter_increase(frame, "num_preemptions", at(-30), at(0)) is None
    assert counter_increase(frame, "num_preemptions", at(100), at(200)) is None
    assert counter_increase(frame, "missing_metric", at(0), at(15)) is None


def test_counter_isolated_old_preemption_is_zero_now() -> None:
    # a cumulative counter > 0 is not "preempting now" (vllm-doctor's flaw)
    frame = _counter_series([1, 1, 1, 1])
    assert counter_increase(frame, "num_preemptions", at(0), at(45)) == 0


def test_counter_series_are_kept_apart_by_engine_and_source() -> None:
    engine0 = snapshots(
        [(0, counter_lines("num_preemptions", 10)), (15, counter_lines("num_preemptions", 12))]
    )
    engine1 = snapshots(
        [
            (0, counter_lines("num_preemptions", 500, engine="1")),
            (15, counter_lines("num_preemptions", 501, engine="1")),
        ]
    )
    other_pod = snapshots(
        [(0, counter_lines("num_preemptions", 7)), (15, counter_lines("num_preemptions", 9))],
        source="pod-b",
    )
    frame = pl.concat([engine0, engine1, other_pod])
    assert counter_increase(frame, "num_preemptions", at(0), at(15)) == 2 + 1 + 2


def test_windows_must_be_valid() -> None:
    frame = _counter_series([1, 2])
    with pytest.raises(ValueError):
        counter_increases(frame, "num_preemptions", [(at(10), at(0))])
    with pytest.raises(ValueError):
        counter_increases(frame, "num_preemptions", [(at(0), at(20)), (at(10), at(30))])


# --- gauges -------------------------------------------------------------------------------


def test_gauge_window_max_and_mean_combining_engines() -> None:
    frame = snapshots(
        [
            (
                0,
                gauge_lines("kv_cache_usage_perc", {"0": 0.5, "1": 0.9})
                + gauge_lines("num_requests_running", {"0": 10, "1": 20}),
            ),
            (
                15,
                gauge_lines("kv_cache_usage_perc", {"0": 0.7, "1": 0.6})
                + gauge_lines("num_requests_running", {"0": 12, "1": 20}),
            ),
            (
                30,
                gauge_lines("kv_cache_usage_perc", {"0": 1.0, "1": 1.0})
                + gauge_lines("num_requests_running", {"0": 0, "1": 0}),
            ),
        ]
    )
    # per scrape: fullest engine (0.9, 0.7) then window max/mean; the scrape at 30 is outside
    kv_max, kv_mean = gauge_window(frame, "kv_cache_usage_perc", at(0), at(30))
    assert kv_max == pytest.approx(0.9) and kv_mean == pytest.approx(0.8)
    assert gauge_window(frame, "num_requests_running", at(0), at(30)) == (32, 31)
    assert gauge_window(frame, "kv_cache_usage_perc", at(0), at(30), across="mean") == (
        pytest.approx((0.7, 0.675))
    )
    assert gauge_window(frame, "kv_cache_usage_perc", at(60), at(90)) == (None, None)


def test_gauge_window_filters_on_labels() -> None:
    lines = ["# TYPE vllm:num_requests_waiting_by_reason gauge"]
    lines += [
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 7',
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 2',
    ]
    frame = snapshots([(0, lines)])
    assert gauge_window(
        frame, "num_requests_waiting_by_reason", at(0), at(1), labels={"reason": "capacity"}
    ) == (7, 7)
    assert gauge_window(frame, "num_requests_waiting_by_reason", at(0), at(1)) == (9, 9)


def test_info_labels_latest_per_engine() -> None:
    lines = ["# TYPE vllm:cache_config_info gauge"]
    lines += [
        f'vllm:cache_config_info{{block_size="16",engine="{e}",kv_cache_size_tokens="441728"}} 1'
        for e in ("0", "1")
    ]
    found = info_labels(snapshots([(0, lines)]))
    assert [f["engine"] for f in found] == ["0", "1"]
    assert found[0]["kv_cache_size_tokens"] == "441728"
    assert info_labels(snapshots([(0, gauge_lines("kv_cache_usage_perc", {"0": 1}))])) == []


# --- per-request samples -----------------------------------------------------------------


def _latencies(e2e: list[float], *, offset: float = 0.0, success: bool = True) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "source": ["b.json"] * len(e2e),
            "deployment": ["d"] * len(e2e),
            "request_id": [str(i) for i in range(len(e2e))],
            "start": [at(offset + i * 0.1) for i in range(len(e2e))],
            "e2e": e2e,
            "ttft": [v / 10 for v in e2e],
            "tpot": [None] * len(e2e),
            "prompt_tokens": [100] * len(e2e),
            "output_tokens": [50] * len(e2e),
            "success": [success] * len(e2e),
            "origin": ["csv"] * len(e2e),
        },
        schema=REQUEST_LATENCIES,
    )


def test_samples_window_exact_quantiles() -> None:
    frame = _latencies([float(v) for v in range(1, 101)])
    stats = samples_window_stats(frame, "e2e", at(0), at(60))
    assert stats is not None
    assert stats.source == "samples" and stats.count == 100
    assert stats.mean == pytest.approx(50.5)
    assert stats.p50 == pytest.approx(50.5)
    assert stats.p90 == pytest.approx(90.1)
    assert stats.p99 == pytest.approx(99.01)
    assert stats.p99_over_mean == pytest.approx(99.01 / 50.5)
    assert not stats.bucket_limited
    ttft = samples_window_stats(frame, "ttft", at(0), at(60))
    assert ttft is not None and ttft.p50 == pytest.approx(5.05)


def test_samples_window_uses_request_start_and_skips_failures() -> None:
    frame = pl.concat(
        [
            _latencies([1.0, 2.0, 3.0]),
            _latencies([900.0], success=False),
            _latencies([5.0], offset=30),
        ]
    )
    early = samples_window_stats(frame, "e2e", at(0), at(30))
    assert early is not None and early.count == 3 and early.p50 == pytest.approx(2.0)
    late = samples_window_stats(frame, "e2e", at(30), at(60))
    assert late is not None and late.count == 1
    assert samples_window_stats(frame, "tpot", at(0), at(60)) is None
    assert samples_window_stats(frame, "e2e", at(100), at(160)) is None


def test_histogram_counts_per_bucket_for_request_num_preemptions() -> None:
    first = {"1": 10, "2": 10, "5": 10, "+Inf": 10}
    later = {"1": 70, "2": 85, "5": 96, "+Inf": 100}
    frame = snapshots(
        [
            (0, histogram_lines("request_num_preemptions", first, 0, 10)),
            (30, histogram_lines("request_num_preemptions", later, 80, 100)),
        ]
    )
    windows = [(at(-30), at(0)), (at(0), at(30))]
    before, during = histogram_windows_counts(frame, "request_num_preemptions", windows)
    assert before is None
    assert during == [(1.0, 60.0), (2.0, 15.0), (5.0, 11.0), (INF, 4.0)]
    # requests preempted twice or more in the window: 30 of 90
    assert sum(count for le, count in during if le > 1) == 30


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 60),  # start, seconds: often on a window's edge
            st.one_of(st.none(), st.floats(0, 50), st.just(float("nan"))),
            st.one_of(st.none(), st.booleans()),
        ),
        max_size=60,
    ),
    st.lists(st.tuples(st.integers(0, 8), st.integers(1, 20)), min_size=1, max_size=6),
)
def test_sorted_samples_take_the_same_rows_as_placed_ones(
    rows: list[tuple[int, float | None, bool | None]], gaps: list[tuple[int, int]]
) -> None:
    # Sorted rows (log latencies) are sliced per window; any order is placed row by row.
    rows = sorted(rows, key=lambda row: row[0])
    frame = pl.DataFrame(
        {
            "start": [at(s) for s, _, _ in rows],
            "e2e": [v for _, v, _ in rows],
            "success": [ok for _, _, ok in rows],
        },
        schema={"start": REQUEST_LATENCIES["start"], "e2e": pl.Float64, "success": pl.Boolean},
    )
    windows, edge = [], 0
    for gap, width in gaps:
        windows.append((at(edge + gap), at(edge + gap + width)))
        edge += gap + width
    assert frame["start"].is_sorted()
    assert samples_windows_stats(frame, "e2e", windows) == _placed_windows_stats(
        frame, "e2e", windows
    )
