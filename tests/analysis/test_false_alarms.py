"""No false alarms: verdicts follow the evidence, not window alignment or empty windows."""

from __future__ import annotations

import pytest
from preemptscope.analysis.analyze import DeploymentInputs, analyze_deployment
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import DeploymentReport

from .builders import logframes, metrics_frame, sample, stat, warning

P = AnalysisParams()


def run(params: AnalysisParams = P, **kwargs: object) -> DeploymentReport:
    return analyze_deployment(DeploymentInputs("d", **kwargs), params)  # type: ignore[arg-type]


def light(i: int) -> dict[str, object]:
    """A lightly loaded server: a few requests, a few arriving (Waiting <= 3), KV <= 8 %."""
    return stat(
        i * 10, running=1 + i % 4, waiting=(0, 1, 3, 2, 0, 1)[i % 6], kv=0.02 + 0.01 * (i % 7)
    )


@pytest.mark.parametrize("config", [{"max_num_seqs": "32"}, {}])
def test_a_lightly_loaded_server_is_ok(config: dict[str, str]) -> None:
    report = run(logs=[logframes([light(i) for i in range(90)], config=config)])
    assert report.verdict.state == "ok", [e.message for e in report.verdict.evidence]
    assert not any(w.queue_bound or w.over_capacity for w in report.windows)
    assert not report.advice


def test_a_full_batch_with_a_steady_queue_is_over_capacity() -> None:
    """Ten minutes of a queue behind a batch pinned at max_num_seqs is a sustained episode of
    saturation: over capacity by the same rules as preemption (issue 23), not at risk."""
    rows = [stat(i * 10, running=32, waiting=10, kv=0.5) for i in range(60)]
    report = run(logs=[logframes(rows, config={"max_num_seqs": "32"})])
    assert report.verdict.state == "over_capacity" and report.verdict.problem == "throughput"
    assert report.verdict.limit == "max_num_seqs"


def test_a_short_queue_behind_a_full_batch_is_at_risk() -> None:
    """Saturation shorter than an episode still makes the server at risk, never ok."""
    rows = [stat(i * 10, running=32, waiting=10, kv=0.5) for i in range(5)]
    rows += [stat(50 + i * 10, running=12, waiting=0, kv=0.2) for i in range(30)]
    report = run(logs=[logframes(rows, config={"max_num_seqs": "32"})])
    assert report.verdict.state == "at_risk", [e.message for e in report.verdict.evidence]
    assert report.verdict.limit == "max_num_seqs"


def test_lone_warnings_do_not_bridge_empty_windows() -> None:
    """Two V0 warnings 86 s apart with no stats at all: two lone windows, not an episode."""
    warnings = [warning(10, 1), warning(96, 51)]
    report = run(logs=[logframes([], warnings, era="v0", version="0.6.3")])
    assert report.verdict.state != "over_capacity"
    assert all(e.windows == 1 for e in report.episodes) or len(report.episodes) <= 2
    assert all((e.duration_s or 0) < P.min_episode_s for e in report.episodes)


def test_an_empty_window_ends_an_episode() -> None:
    hot = [stat(i * 10, running=40, waiting=9, kv=0.99, preemptions=2) for i in range(6)]
    later = [stat(120 + i * 10, running=40, waiting=9, kv=0.99, preemptions=2) for i in range(6)]
    report = run(logs=[logframes(hot + later)])  # nothing at all in 60-120 s
    assert len(report.episodes) == 2
    assert report.verdict.state != "over_capacity"  # 60 s + 60 s is not a 2-min overload


@pytest.mark.parametrize("offset", [0, 5, 20, 35, 50])
def test_a_short_overload_does_not_depend_on_the_window_edges(offset: int) -> None:
    """50 s of overload is short whether or not it straddles a minute boundary."""
    rows = [
        stat(t, running=40, waiting=8, kv=0.99)
        if offset + 60 <= t < offset + 60 + 50
        else stat(t, running=8, waiting=0, kv=0.4)
        for t in range(0, 360, 5)
    ]
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "at_risk"
    assert [round(e.duration_s or 0) for e in report.episodes] == [50]


@pytest.mark.parametrize("offset", [0, 25, 55])
def test_a_long_overload_is_over_capacity_wherever_it_starts(offset: int) -> None:
    rows = [
        stat(t, running=40, waiting=8, kv=0.99)
        if offset + 60 <= t < offset + 60 + 150
        else stat(t, running=8, waiting=0, kv=0.4)
        for t in range(0, 400, 5)
    ]
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "over_capacity"
    assert [round(e.duration_s or 0) for e in report.episodes] == [150]


def test_the_minimum_episode_is_a_setting() -> None:
    rows = [
        stat(t, running=40, waiting=8, kv=0.99)
        if 60 <= t < 150
        else stat(t, running=8, waiting=0, kv=0.4)
        for t in range(0, 400, 5)
    ]
    assert run(logs=[logframes(rows)]).verdict.state == "at_risk"  # 90 s < 120 s
    shorter = AnalysisParams(min_episode_s=60.0)
    assert run(shorter, logs=[logframes(rows)]).verdict.state == "over_capacity"


def test_a_disjoint_snapshot_does_not_make_the_log_old() -> None:
    """A /metrics snapshot copied months later must not turn the log's overload into history."""
    rows = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(60)]
    later = 6858 * 3600.0
    snapshot = metrics_frame(
        [sample(later + t, "kv_cache_usage_perc", 0.1) for t in (0, 15, 30, 45)]
        + [sample(later + t, "num_requests_waiting", 0) for t in (0, 15, 30, 45)]
    )
    report = run(logs=[logframes(rows)], metrics=snapshot)
    assert report.verdict.state == "over_capacity"
    codes = {e.code: e for e in report.verdict.evidence}
    assert "sources are disjoint" in codes["sources_disjoint"].message
    assert "own span" in codes["sources_disjoint"].message
    assert "last_over_capacity" not in codes or "6858" not in codes["last_over_capacity"].message
    # The user's own --now still rules: then the episode is history.
    pinned = AnalysisParams(now=report.windows[-1].end)
    assert run(pinned, logs=[logframes(rows)], metrics=snapshot).verdict.state == "at_risk"


@pytest.mark.parametrize("kv", [5e-324, 1e-6, 0.001])
def test_a_queue_beside_a_near_empty_kv_cache_sizes_no_batch(kv: float) -> None:
    """KV usage too small to read (vLLM prints 0.1 %) suggests no max_num_seqs, and never
    overflows (hypothesis found 5e-324: KV headroom of infinity sequences)."""
    rows = [stat(i * 10, running=1, waiting=10, kv=kv) for i in range(30)]
    report = run(logs=[logframes(rows)])
    assert not any(a.action == "raise_max_num_seqs" for a in report.advice)
