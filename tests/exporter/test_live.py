"""LiveState: the batch analyzer on the recent history; 'now' from the wall clock or the data."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
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


ENDS = {
    "finished": "async_llm_engine.py:140] Finished request cmpl-{i}.",
    # V1 with --enable-log-outputs: a response ends its request.
    "generated": "[logger.py:71] Generated response cmpl-{i}: output: 'ok', finish_reason: stop",
    # A stream whose `(streaming complete)` line never came: still open, so the live service
    # shows it with the end seen so far, as the batch path does at the end of a file.
    "delta": "[logger.py:71] Generated response cmpl-{i} (streaming delta): output: 'o', "
    "finish_reason: None",
}


@pytest.mark.parametrize("end", sorted(ENDS))
def test_request_lines_in_batches_give_the_batch_latency(tmp_path: Path, end: str) -> None:
    # The follower hands over a few lines at a time: requests that start in one batch and
    # finish in a later one are joined (the batch path's reducer), and no request row stays.
    from preemptscope.analysis.analyze import DeploymentInputs, analyze
    from preemptscope.analysis.params import AnalysisParams
    from preemptscope.ingest.logs import ParseState
    from preemptscope.ingest.reduce import reduce_paths

    stats = (
        "INFO 03-14 09:{m:02d}:{s:02d} metrics.py:349] Avg prompt throughput: 10.0 tokens/s, "
        "Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 "
        "reqs, GPU KV cache usage: 40.0%, CPU KV cache usage: 0.0%."
    )
    lines = []
    for i in range(40):
        m, s = divmod(i * 10, 60)
        lines.append(stats.format(m=m, s=s))
        lines.append(
            f"INFO 03-14 09:{m:02d}:{s:02d} logger.py:37] Received request cmpl-{i}: "
            "prompt: 'hi', params: SamplingParams(n=1)."
        )
        if i >= 3:
            lines.append(f"INFO 03-14 09:{m:02d}:{s:02d} " + ENDS[end].format(i=i - 3))
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    options = ParseOptions(reference_time=WHEN)
    live = LiveState(["prod"], window_s=60, history_s=7200, clock="data")
    state = ParseState()
    for start in range(0, len(lines), 7):
        batch = lines[start : start + 7]
        live.add_log_batch(
            parse_lines(
                batch,
                source=str(path),
                deployment="prod",
                first_line=start + 1,
                options=options,
                state=state,
                final=start + 7 >= len(lines),
            )
        )
    live_windows = live.analyze_now().deployments[0].windows
    (frames,) = reduce_paths([str(path)], deployment="prod", options=options)
    report = analyze([DeploymentInputs(name="prod", logs=[frames])], AnalysisParams(window_s=60))
    batch_windows = report.deployments[0].windows
    assert [w.latency for w in live_windows] == [w.latency for w in batch_windows]
    assert any(w.latency for w in live_windows)  # e2e of 30 s, from the joined pairs
    kept = sum(f["requests"].height for f in live._logs[("prod", str(path))])
    assert kept < 40
