"""A window counts as complete only once every input of its deployment is read past its end.

A line stamped in a window's last second can be read after an analysis that ran past the
window's end (the follower polls, the parser runs twice a second, stamps are whole seconds);
a scrape is stamped when it starts. Gauges of a "complete" window must never change later.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from preemptscope.dashboards.live import window_split
from preemptscope.exporter.live import LiveState
from preemptscope.ingest.logs import ParseOptions, parse_lines

T0 = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)


def stats_line(at: datetime, kv: float) -> str:
    return (
        f"INFO {at:%m-%d %H:%M:%S} metrics.py:349] Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, "
        f"Pending: 0 reqs, GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%."
    )


def add(live: LiveState, deployment: str, lines: list[str], first: int) -> None:
    options = ParseOptions(reference_time=T0 + timedelta(hours=1))
    frames = parse_lines(
        lines, source=f"{deployment}.log", deployment=deployment, first_line=first, options=options
    )
    live.add_log_batch(frames)


def minute(live: LiveState, deployment: str, n: int, kv: float) -> None:
    """Stats lines every 10 s through minute n (the window [9:0n, 9:0n+1))."""
    start = T0 + timedelta(minutes=n)
    lines = [stats_line(start + timedelta(seconds=s), kv) for s in range(0, 60, 10)]
    add(live, deployment, lines, first=1 + 6 * n)


def test_a_window_is_complete_only_once_its_log_is_read_past_its_end() -> None:
    live = LiveState(["a", "b"], window_s=60, history_s=3600)
    minute(live, "a", 0, 40.0)
    minute(live, "b", 0, 40.0)
    # a's log is read up to 9:00:59 (a line of 9:00:59 may still come); b's past 9:01.
    live.mark_input("log\ta.log", "a", T0 + timedelta(seconds=59))
    live.mark_input("log\tb.log", "b", T0 + timedelta(seconds=61))
    report = live.analyze_now(T0 + timedelta(seconds=62))
    a, b = report.deployments
    assert report.parameters["complete_before"] == {
        "a": (T0 + timedelta(seconds=59)).isoformat(),
        "b": (T0 + timedelta(seconds=61)).isoformat(),
    }
    complete_a, filling_a = window_split(a, report)
    complete_b, _ = window_split(b, report)
    assert complete_a is None  # ended, but its last second may still be unread
    assert filling_a is not None and filling_a.start == T0
    assert complete_b is not None and complete_b.start == T0

    # The late line arrives, and a is read past the end: now the window is complete, with it.
    add(live, "a", [stats_line(T0 + timedelta(seconds=59), 95.0)], first=7)
    live.unmark_input("log\ta.log")  # (read up to the analysis)
    report = live.analyze_now(T0 + timedelta(seconds=63))
    assert set(report.parameters["complete_before"]) == {"b"}
    complete_a, _ = window_split(report.deployments[0], report)
    assert complete_a is not None and complete_a.kv_usage_max == pytest.approx(0.95)


def test_a_scrape_under_way_holds_back_only_its_own_deployment() -> None:
    live = LiveState(["a", "b"], window_s=60, history_s=3600)
    for n in (0, 1):
        minute(live, "a", n, 40.0)
        minute(live, "b", n, 40.0)
    live.mark_input("scrape\thttp://a/metrics", "a", T0 + timedelta(seconds=119))
    report = live.analyze_now(T0 + timedelta(seconds=121))
    complete_a, _ = window_split(report.deployments[0], report)
    complete_b, _ = window_split(report.deployments[1], report)
    assert complete_a is not None and complete_a.start == T0  # not 9:01: the scrape may add
    assert complete_b is not None and complete_b.start == T0 + timedelta(minutes=1)
    live.unmark_input("scrape\thttp://a/metrics")
    report = live.analyze_now(T0 + timedelta(seconds=121))
    complete_a, _ = window_split(report.deployments[0], report)
    assert complete_a is not None and complete_a.start == T0 + timedelta(minutes=1)


def test_a_batch_report_has_every_window_complete() -> None:
    live = LiveState(["a"], window_s=60, history_s=3600)
    minute(live, "a", 0, 40.0)
    report = live.analyze_now(T0 + timedelta(seconds=30))
    # The live report at 9:00:30: the window is filling, not complete.
    assert window_split(report.deployments[0], report) == (None, report.deployments[0].windows[0])
    import dataclasses

    batch = dataclasses.replace(report, generated_at=None, parameters={})
    complete, filling = window_split(batch.deployments[0], batch)
    assert complete is not None and filling is None
