"""No tail from a bucket floor (issue 25): with vLLM's real default bucket sets, a p99 in the
first bucket, or one whose bucket also holds the mean, is no p99/mean ratio; a resolved tail is.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from preemptscope.analysis.latency import histogram_window_stats, resolved_tail
from preemptscope.analysis.report import LatencyStats
from preemptscope.exporter.demo_vllm import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
)
from preemptscope.ingest.metrics import parse_metrics_text
from prometheus_client import CollectorRegistry, Histogram, generate_latest

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
NAMES = {
    "queue": ("vllm:request_queue_time_seconds", REQUEST_LATENCY_BUCKETS),
    "e2e": ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
    "ttft": ("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
    "itl": ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
}
# vLLM 0.14-0.15 capped e2e at 60 s (before PR #15202).
OLD_E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


def stats(kind: str, observations: list[float], buckets: tuple[float, ...] = ()) -> LatencyStats:
    """The window stats of `observations` made between two scrapes of a real exposition."""
    name, default = NAMES[kind]
    registry = CollectorRegistry()
    histogram = Histogram(name, "h", ["model_name"], buckets=buckets or default, registry=registry)
    child = histogram.labels("m")
    frames = [
        parse_metrics_text(
            generate_latest(registry).decode(), timestamp=T0, source="s", deployment="d"
        )
    ]
    for value in observations:
        child.observe(value)
    frames.append(
        parse_metrics_text(
            generate_latest(registry).decode(),
            timestamp=T0 + timedelta(seconds=30),
            source="s",
            deployment="d",
        )
    )
    found = histogram_window_stats(
        pl.concat(frames), kind, T0 - timedelta(seconds=1), T0 + timedelta(seconds=60)
    )
    assert found is not None and found.count == len(observations)
    return found


def spread(low: float, high: float, n: int) -> list[float]:
    return [low + (high - low) * i / max(1, n - 1) for i in range(n)]


def test_microsecond_queue_times_are_no_tail() -> None:
    """The healthy server of issue 25: every queue time ~20 us, in the 0.3 s first bucket. The
    interpolation said p99 0.297 s, p99/mean ~15,000; there is no tail to quote."""
    found = stats("queue", spread(0.000015, 0.000025, 200))
    assert found.mean == pytest.approx(0.00002)
    assert found.p99 is None and found.p99_over_mean is None
    assert found.bucket_limited


def test_ttft_under_a_millisecond_is_no_tail() -> None:
    found = stats("ttft", spread(0.0002, 0.0009, 100))
    assert found.p99 is None and found.p99_over_mean is None


def test_a_p99_in_the_bucket_of_the_mean_is_unresolved() -> None:
    """Everything between 2.6 and 4.9 s: p99 and mean share the (2.5, 5] bucket, the ratio
    could be anything from 1 to 1.9; the interpolated p99 stays, the ratio does not."""
    found = stats("e2e", spread(2.6, 4.9, 200))
    assert found.p99 is not None and 2.5 < found.p99 <= 5.0
    assert found.p99_over_mean is None


def test_a_preemption_tail_is_resolved() -> None:
    """Most requests 2-8 s, 3 % preempted at 25-55 s: p99 in (50, 60], far above the mean."""
    found = stats("e2e", spread(2.0, 8.0, 970) + spread(25.0, 55.0, 30))
    assert found.mean is not None and found.p99 is not None
    assert found.p99 > 40 and not found.bucket_limited
    ratio = found.p99_over_mean
    assert ratio is not None and ratio == pytest.approx(found.p99 / found.mean) and ratio > 5


def test_itl_with_real_buckets_is_resolved() -> None:
    found = stats("itl", spread(0.012, 0.03, 500) + spread(0.2, 0.28, 10))
    assert found.p99_over_mean is not None and found.p99_over_mean > 5


def test_the_top_bucket_is_a_lower_bound_still_a_tail() -> None:
    """Old vLLM capped e2e at 60 s: a p99 past it reads as 60 s (flagged as a bound); with a
    mean of a few seconds that is a tail all the same (its ratio is a lower bound)."""
    found = stats("e2e", spread(1.0, 5.0, 95) + spread(70.0, 90.0, 5), OLD_E2E_BUCKETS)
    assert found.p99 == 60.0 and found.bucket_limited
    assert found.p99_over_mean is not None and found.p99_over_mean > 5


def test_resolved_tail_rule() -> None:
    assert not resolved_tail(0.297, None, 0.00002)  # first bucket
    assert not resolved_tail(4.0, 2.5, 3.0)  # the mean's own bucket
    assert resolved_tail(30.0, 20.0, 5.0)
    assert not resolved_tail(None, 20.0, 5.0)
    assert not resolved_tail(30.0, 20.0, None)
