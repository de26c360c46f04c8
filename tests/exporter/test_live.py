"""LiveState: the batch analyzer on the recent history; 'now' from the wall clock or the data."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from preemptscope.exporter.live import LiveState, counter_delta
from preemptscope.ingest.logs import ParseOptions, parse_lines

FIXTURE = Path(__file__).parent / "fixtures" / "v0-over-capacity.log"
# The fixture's traffic: 2026-03-14 09:00-09:15 UTC, over capacity 09:05-09:12.
WHEN = datetime(2026, 3, 14, 9, 15, tzinfo=UTC)


def load(live: LiveState) -> None:
    lines = FIXTURE.read_text().splitlines()
    options = ParseOptions(reference_time=WHEN)
    live.add_log_batch(parse_lines(lines, source=str(FIXTURE), deployment="prod", options=options))


def test_data_clock_replays_old_logs() -> None:
    live = LiveState(["prod"], window_s=60, history_s=3600, clock="data")
    load(live)
    report = live.analyze_now()
    assert report.deployments[0].verdict.state == "over_capacity"
    assert report.generated_at is not None and report.generated_at.date() == WHEN.date()


def test_wall_clock_drops_data_older_than_the_history() -> None:
    live = LiveState(["prod"], window_s=60, history_s=900, clock="wall")
    load(live)
    report = live.analyze_now()
    deployment = report.deployments[0]
    assert deployment.windows == [] or all(w.samples == 0 for w in deployment.windows)
    assert deployment.verdict.state == "insufficient_data"
    # Counters are running totals: they keep what was read even when the history forgets it.
    assert live.snapshot().totals["prod"].lines == 132


def test_resolve_after_clears_the_live_verdict() -> None:
    params = {"stale_after_s": 120.0}
    live = LiveState(["prod"], window_s=60, history_s=3600, clock="data", params=params)
    load(live)  # the data ends three minutes after the last over-capacity window
    assert live.analyze_now().deployments[0].verdict.state != "over_capacity"
    at_end = LiveState(["prod"], window_s=60, history_s=3600, params=params)
    load(at_end)
    report = at_end.analyze_now(datetime(2026, 3, 14, 9, 13, tzinfo=UTC))
    assert report.deployments[0].verdict.state == "over_capacity"


def test_counter_delta_reads_a_drop_as_a_restart() -> None:
    assert counter_delta(None, 50) == 0  # first sight: a baseline, not an increase
    assert counter_delta(50, 80) == 30
    assert counter_delta(80, 5) == 5
