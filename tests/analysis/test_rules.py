"""Every verdict rule on hand-built frames."""

from __future__ import annotations

from datetime import timedelta

import pytest
from preemptscope.analysis.analyze import DeploymentInputs, analyze, analyze_deployment
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import DeploymentReport

from .builders import (
    at,
    histogram,
    latencies_frame,
    logframes,
    metrics_frame,
    request,
    sample,
    stat,
    warning,
)

P = AnalysisParams()


def run(**kwargs: object) -> DeploymentReport:
    return analyze_deployment(DeploymentInputs("d", **kwargs), P)  # type: ignore[arg-type]


def quiet(start: float, end: float, step: float = 10.0, **kw: object) -> list[dict[str, object]]:
    n = int((end - start) / step)
    return [stat(start + i * step, running=8, waiting=0, kv=0.40, **kw) for i in range(n)]  # type: ignore[arg-type]


def test_sustained_preemption_is_over_capacity() -> None:
    rows = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(60)]
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "over_capacity"
    assert report.verdict.problem == "capacity"
    assert report.preemptions.total == 180
    assert report.preemptions.exact
    assert report.preemptions.evidence == "v1_stats_field"
    assert len(report.episodes) == 1 and report.episodes[0].windows == 10
    codes = {e.code: e for e in report.verdict.evidence}
    assert codes["preemptions"].value == 180
    assert "180 preemptions (exact" in codes["preemptions"].message
    assert codes["kv_saturated"].value == pytest.approx(1.0)


def test_isolated_old_preemption_is_not_over_capacity() -> None:
    burst = [stat(0, running=30, waiting=2, kv=0.99, preemptions=2)]
    rows = burst + quiet(10, 4 * 3600)
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "ok"
    assert report.preemptions.total == 2
    codes = {e.code for e in report.verdict.evidence}
    assert "isolated_history" in codes
    assert report.advice == []


def test_recent_isolated_preemption_is_at_risk() -> None:
    rows = [*quiet(0, 3600), stat(3600, running=30, waiting=2, kv=0.99, preemptions=2)]
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "at_risk"
    assert report.advice and report.advice[0].action == "raise_gpu_memory_utilization"


def test_old_sustained_episode_is_history_at_risk() -> None:
    hot = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(60)]
    report = run(logs=[logframes(hot + quiet(600, 600 + 3 * 3600))])
    assert report.verdict.state == "at_risk"
    assert report.episodes[0].windows == 10


def test_cumulative_counter_from_long_ago_is_not_counted_now() -> None:
    # vllm-doctor's flaw: num_preemptions_total == 5 at every scrape is history, not load.
    rows = []
    for i in range(30):
        rows.append(sample(i * 15, "num_preemptions", 5.0, kind="counter"))
        rows.append(sample(i * 15, "kv_cache_usage_perc", 0.35))
        rows.append(sample(i * 15, "num_requests_running", 6.0))
        rows.append(sample(i * 15, "num_requests_waiting", 0.0))
    report = run(metrics=metrics_frame(rows))
    assert report.verdict.state == "ok"
    assert report.preemptions.total == 0
    assert report.preemptions.exact
    assert report.preemptions.evidence == "metrics_counter"
    assert report.preemptions.since_start == 5


def test_cache_reset_burst_is_not_capacity() -> None:
    rows = quiet(0, 600)
    rows[30] = stat(300, running=0, waiting=0, kv=0.02, preemptions=8)
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "ok"
    reset = [w for w in report.windows if w.forced_preemptions]
    assert len(reset) == 1 and not reset[0].over_capacity
    assert report.preemptions.cache_reset_preemptions == 8
    assert any(e.code == "cache_reset" for e in report.verdict.evidence)


def test_idle_is_ok() -> None:
    rows = [stat(i * 10, running=0, waiting=0, kv=0.0) for i in range(120)]
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "ok"
    assert all(w.idle for w in report.windows)
    assert not any(w.over_capacity for w in report.windows)


def test_too_little_data_is_insufficient() -> None:
    report = run(logs=[logframes([stat(0, running=10, waiting=4, kv=0.58)])])
    assert report.verdict.state == "insufficient_data"
    assert report.verdict.problem == "unknown"


def test_v1_without_counts_infers_but_never_counts() -> None:
    rows = []
    for i in range(36):
        running = 40 - (i % 3) * 4  # drops every stats interval: evictions
        rows.append(stat(i * 10, running=running, waiting=20 + i, kv=0.99))
    report = run(logs=[logframes(rows)])
    assert report.preemptions.total is None
    assert report.preemptions.evidence == "inferred"
    likely = [w for w in report.windows if w.likely_preempting]
    assert likely and all(w.preemptions is None for w in likely)
    assert all(w.preemption_quality == "inferred" for w in likely)
    assert report.verdict.state == "over_capacity"
    assert any(e.code == "likely_preempting" for e in report.verdict.evidence)


def test_v1_kv_full_with_queue_but_running_steady_is_not_inferred_preemption() -> None:
    rows = [stat(i * 10, running=40, waiting=20, kv=0.99) for i in range(36)]
    report = run(logs=[logframes(rows)])
    assert not any(w.likely_preempting for w in report.windows)
    assert report.verdict.state == "over_capacity"  # KV full with a queue: still over capacity


def test_v0_warning_counter_is_a_lower_bound_spread_over_full_windows() -> None:
    stats = [stat(i * 5, running=30, waiting=5, kv=0.99, era="v0") for i in range(120)]
    warns = [warning(12, 1), warning(250, 51), warning(590, 101)]
    report = run(logs=[logframes(stats, warns, era="v0")])
    pre = report.preemptions
    assert pre.total == 101
    assert not pre.exact
    assert pre.evidence == "v0_warning_counter"
    assert pre.warning_lines == 3
    per_window = [w.preemptions for w in report.windows]
    assert sum(p or 0 for p in per_window) == 101
    # 50 preemptions between t=12 and t=250 are spread over windows 0..4, not dumped at t=250
    assert all((p or 0) > 0 for p in per_window)
    assert {w.preemption_quality for w in report.windows} == {"lower_bound"}
    assert report.verdict.state == "over_capacity"


def test_v0_counter_restart_starts_a_new_run() -> None:
    stats = [stat(i * 5, running=30, waiting=5, kv=0.99, era="v0") for i in range(120)]
    warns = [warning(10, 51), warning(200, 101), warning(400, 1), warning(500, 51)]
    report = run(logs=[logframes(stats, warns, era="v0")])
    # runs: 51 -> 101 places 1 + 50; restart at 1 -> 51 places 1 + 50
    assert report.preemptions.total == 102
    assert report.preemptions.since_start == 101 + 51


def test_v0_warning_without_timestamp_still_counts() -> None:
    report = run(logs=[logframes([], [warning(None, 51)], era="v0")])
    assert report.preemptions.total == 1
    assert report.preemptions.since_start == 51
    assert report.verdict.state == "at_risk"


def test_metrics_counter_is_exact_and_reset_safe() -> None:
    rows = []
    values = [0, 10, 25, 40, 3, 20]  # restart between the 4th and 5th scrape
    for i, v in enumerate(values):
        rows.append(sample(i * 60 + 30, "num_preemptions", float(v), kind="counter"))
        rows.append(sample(i * 60 + 30, "kv_cache_usage_perc", 0.99))
        rows.append(sample(i * 60 + 30, "num_requests_waiting", 7.0))
        rows.append(sample(i * 60 + 30, "num_requests_running", 30.0))
    report = run(metrics=metrics_frame(rows))
    assert report.preemptions.total == 10 + 15 + 15 + 3 + 17
    assert report.preemptions.since_start == 40 + 20  # both engine runs, up to their last value
    assert report.preemptions.exact
    assert all((w.preemptions or 0) >= 0 for w in report.windows)
    assert report.verdict.state == "over_capacity"


def test_metrics_counter_wins_over_log_field() -> None:
    rows = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=1) for i in range(36)]
    samples = [
        sample(i * 60 + 5, "num_preemptions", float(i * 7), kind="counter") for i in range(6)
    ]
    report = run(logs=[logframes(rows)], metrics=metrics_frame(samples))
    sources = {w.preemption_source for w in report.windows if w.preemptions}
    assert "metrics_counter" in sources
    assert report.preemptions.evidence == "metrics_counter"


def test_waiting_for_capacity_with_high_kv_is_over_capacity() -> None:
    rows = []
    for i in range(20):
        t = i * 30
        rows.append(sample(t, "kv_cache_usage_perc", 0.93))
        rows.append(sample(t, "num_requests_running", 20.0))
        rows.append(sample(t, "num_requests_waiting", 6.0))
        rows.append(sample(t, "num_requests_waiting_by_reason", 6.0, labels={"reason": "capacity"}))
        rows.append(sample(t, "num_requests_waiting_by_reason", 0.0, labels={"reason": "deferred"}))
    report = run(metrics=metrics_frame(rows))
    assert report.windows[0].waiting_for_capacity_max == 6
    assert report.verdict.state == "over_capacity"


def test_bucket_limited_p99_is_flagged() -> None:
    rows = []
    seen: list[float] = []
    for i in range(6):
        seen += [0.9] * 20 + [200.0] * 2  # 2 of 22 beyond the last finite bucket (120 s)
        rows += histogram(i * 60 + 30, "e2e_request_latency_seconds", seen)
        rows.append(sample(i * 60 + 30, "kv_cache_usage_perc", 0.5))
    report = run(metrics=metrics_frame(rows))
    stats = [w.latency["e2e"] for w in report.windows if "e2e" in w.latency]
    assert stats and all(s.bucket_limited for s in stats)
    assert all(s.source == "histogram" and s.p99 == 120 for s in stats)


def test_client_latency_correlates_with_preemption() -> None:
    stats_rows, reqs = [], []
    for i in range(60):
        hot = (i // 6) % 2 == 1  # alternate 1-minute quiet / preempting windows
        stats_rows.append(
            stat(
                i * 10,
                running=40,
                waiting=10 if hot else 0,
                kv=0.99 if hot else 0.6,
                preemptions=5 if hot else 0,
            )
        )
        for k in range(10):
            slow = hot and k == 0
            reqs.append(request(i * 10 + k, 30.0 if slow else 2.0 + 0.01 * k))
    report = run(logs=[logframes(stats_rows)], latencies=latencies_frame(reqs))
    c = report.correlation
    assert c.metric == "e2e"
    assert c.windows_with_preemption == 5 and c.windows_without_preemption == 5
    assert c.p99_over_mean_with is not None and c.p99_over_mean_without is not None
    assert c.p99_over_mean_with > 2 * c.p99_over_mean_without
    assert c.spearman_rho is not None and c.spearman_rho > 0.8
    assert c.best_lag_windows == 0
    assert any(e.code == "p99_over_mean" for e in report.verdict.evidence)


def test_priority_policy_without_full_cache_is_an_ordering_problem() -> None:
    rows = [stat(i * 10, running=30, waiting=3, kv=0.85, preemptions=2) for i in range(60)]
    report = run(logs=[logframes(rows, config={"scheduling_policy": "priority"})])
    assert report.verdict.state == "over_capacity"
    assert report.verdict.problem == "ordering"
    assert report.advice[0].action == "review_request_priorities"
    ordering = [e for e in report.verdict.evidence if e.code == "ordering"]
    assert ordering and "in only 0 of 10 preempting windows" in ordering[0].message


def test_fcfs_same_data_is_a_capacity_problem() -> None:
    rows = [stat(i * 10, running=30, waiting=3, kv=0.85, preemptions=2) for i in range(60)]
    report = run(logs=[logframes(rows, config={"scheduling_policy": "fcfs"})])
    assert report.verdict.problem == "capacity"


def test_now_parameter_makes_an_old_episode_stale() -> None:
    hot = [stat(i * 10, running=40, waiting=12, kv=0.99, preemptions=3) for i in range(60)]
    live = analyze_deployment(DeploymentInputs("d", logs=[logframes(hot)]), P)
    later = AnalysisParams(now=at(600) + timedelta(hours=5))
    old = analyze_deployment(DeploymentInputs("d", logs=[logframes(hot)]), later)
    assert live.verdict.state == "over_capacity"
    assert old.verdict.state == "at_risk"


def test_windows_are_aligned_and_gaps_filled() -> None:
    rows = [stat(5, running=1, waiting=0, kv=0.1), stat(185, running=1, waiting=0, kv=0.1)]
    report = run(logs=[logframes(rows)])
    assert [w.start.second for w in report.windows] == [0, 0, 0, 0]
    assert [w.samples for w in report.windows] == [1, 0, 0, 1]
    assert not report.windows[1].idle  # no data is not "idle"


def test_engines_add_up_and_kv_is_the_fullest() -> None:
    rows = [stat(i * 10, running=10, waiting=1, kv=0.5, engine=0) for i in range(6)]
    rows += [stat(i * 10, running=20, waiting=2, kv=0.9, engine=1) for i in range(6)]
    report = run(logs=[logframes(rows)])
    w = report.windows[0]
    assert w.running_max == 30 and w.waiting_max == 3
    assert w.kv_usage_max == pytest.approx(0.9)


def test_analyze_many_deployments_and_json_contract() -> None:
    a = DeploymentInputs("a", logs=[logframes(quiet(0, 600))])
    b = DeploymentInputs(
        "b",
        logs=[
            logframes(
                [stat(i * 10, running=40, waiting=9, kv=0.99, preemptions=1) for i in range(60)]
            )
        ],
    )
    report = analyze([a, b])
    data = report.to_dict()
    assert data["schema_version"] == 1
    assert [d["name"] for d in data["deployments"]] == ["a", "b"]
    states = [d["verdict"]["state"] for d in data["deployments"]]
    assert states == ["ok", "over_capacity"]
    b_dict = data["deployments"][1]
    for key in ("preemptions", "capacity", "advice", "windows", "episodes", "correlation"):
        assert key in b_dict
    assert set(b_dict["preemptions"]) >= {"total", "exact", "evidence"}
    assert data["parameters"]["window_s"] == 60.0


def test_growing_queue_with_kv_to_spare_is_a_throughput_problem() -> None:
    rows = [stat(i * 10, running=256, waiting=20 + 30 * i, kv=0.45) for i in range(60)]
    report = run(logs=[logframes(rows, config={"max_num_seqs": "256"})])
    assert report.verdict.state == "over_capacity"
    assert report.verdict.problem == "throughput"
    assert all(w.queue_bound and not w.over_capacity for w in report.windows)
    actions = [a.action for a in report.advice]
    # never the preemption remedies here: KV is not the limit
    assert "lower_max_num_seqs" not in actions
    assert "raise_gpu_memory_utilization" not in actions
    first = report.advice[0]
    assert first.action == "raise_max_num_seqs"
    assert first.current == "256" and first.suggested == str(int(256 * 0.9 / 0.45))
    assert actions[-1] == "add_replicas"


def test_steady_queue_at_a_plateau_is_over_capacity() -> None:
    """Ten minutes of a queue behind running held at 100 (max_num_seqs not printed: inferred
    from the plateau) is sustained saturation, over capacity (issue 23; was at_risk)."""
    rows = [stat(i * 10, running=100, waiting=40, kv=0.6) for i in range(60)]
    report = run(logs=[logframes(rows)])
    assert report.verdict.state == "over_capacity"
    assert report.verdict.limit == "max_num_seqs"
    assert report.verdict.limit_detail is not None
    assert report.verdict.limit_detail.max_num_seqs == 100
    assert report.verdict.limit_detail.max_num_seqs_source == "inferred"
    assert "inferred from a plateau" in report.verdict.limit_detail.reason
    assert report.verdict.problem == "throughput"


def test_batch_not_full_does_not_suggest_a_bigger_batch() -> None:
    rows = [stat(i * 10, running=90, waiting=20 + 30 * i, kv=0.45) for i in range(60)]
    report = run(logs=[logframes(rows, config={"max_num_seqs": "256"})])
    assert report.verdict.problem == "throughput"
    assert [a.action for a in report.advice] == ["add_replicas"]


def test_replica_estimate_from_served_rate_and_queue_growth() -> None:
    stats_rows = [stat(i * 10, running=64, waiting=10 + 20 * i, kv=0.5) for i in range(60)]
    reqs = [request(t * 0.5, 5.0) for t in range(1200)]  # 2 served per second
    report = run(logs=[logframes(stats_rows)], latencies=latencies_frame(reqs))
    replicas = [a for a in report.advice if a.action == "add_replicas"]
    # queue grows 2 requests/s while 2 requests/s are served: demand is 2x
    assert replicas and replicas[0].suggested == "x2.0"


def test_log_lifecycle_lines_give_latency_when_no_client_results() -> None:
    from preemptscope.ingest.schema import REQUESTS

    from .builders import _frame

    stats_rows = [stat(i * 10, running=20, waiting=0, kv=0.5) for i in range(12)]
    events = []
    for i in range(30):
        for event, t in (("received", i * 4), ("finished", i * 4 + 2 + (i % 3))):
            events.append(
                {"source": "vllm.log", "line": 1, "deployment": "d", "timestamp": at(t),
                 "event": event, "request_id": f"cmpl-{i}"}
            )  # fmt: skip
    lf = logframes(stats_rows)
    lf.frames["requests"] = _frame(REQUESTS, events)
    report = run(logs=[lf])
    stats = [w.latency["e2e"] for w in report.windows if "e2e" in w.latency]
    assert sum(s.count for s in stats) == 30
    assert all(s.source == "samples" for s in stats)
    assert max(s.p99 or 0 for s in stats) == pytest.approx(4.0, abs=0.1)


def test_sources_that_never_overlap_are_reported() -> None:
    rows = [stat(i * 10, running=20, waiting=0, kv=0.5) for i in range(30)]
    reqs = [request(8 * 3600 + t, 2.0) for t in range(0, 300, 5)]  # 8 h later: a --tz slip
    report = run(logs=[logframes(rows)], latencies=latencies_frame(reqs))
    codes = {e.code: e for e in report.verdict.evidence}
    assert "sources_disjoint" in codes
    assert "--tz" in codes["sources_disjoint"].message
    assert codes["sources_disjoint"].value == pytest.approx(8 * 3600 - 290, abs=1)


def test_sustained_overload_raises_p99_even_when_p99_over_mean_is_flat() -> None:
    stats_rows, reqs = [], []
    for i in range(60):
        hot = (i // 6) % 2 == 1
        stats_rows.append(
            stat(i * 10, running=40, waiting=30 if hot else 0, kv=0.99 if hot else 0.6,
                 preemptions=4 if hot else 0)
        )  # fmt: skip
        for k in range(10):
            base = 20.0 if hot else 2.0  # everyone slows, the shape stays the same
            reqs.append(request(i * 10 + k, base * (1 + 0.05 * k)))
    report = run(logs=[logframes(stats_rows)], latencies=latencies_frame(reqs))
    c = report.correlation
    assert c.p99_over_mean_with == pytest.approx(c.p99_over_mean_without, rel=0.05)
    assert c.p99_with is not None and c.p99_without is not None
    assert c.p99_with > 5 * c.p99_without
    assert c.spearman_rho_p99 is not None and c.spearman_rho_p99 > 0.8
    assert any(e.code == "p99" for e in report.verdict.evidence)


@pytest.mark.parametrize(
    ("config", "kv"),
    [
        ({"gpu_memory_utilization": "0.8", "max_num_seqs": "64"}, 0.99),
        ({"gpu_memory_utilization": "0.94", "max_num_seqs": "20"}, 0.99),
        ({"gpu_memory_utilization": "0.97", "max_num_seqs": "512"}, 0.99),
        ({"max_num_seqs": "256", "max_num_batched_tokens": "2048"}, 0.5),
    ],
)
def test_advice_is_never_inverted(config: dict[str, str], kv: float) -> None:
    rows = [
        stat(i * 10, running=40 - (i % 2), waiting=10 + 5 * i, kv=kv, preemptions=2 if kv > 0.9
             else 0)
        for i in range(60)
    ]  # fmt: skip
    report = run(
        logs=[logframes(rows, config=config, kv=[("kv_cache_tokens", 40_000, "tokens", None)])]
    )
    assert report.advice
    for a in report.advice:
        if a.current is None or a.suggested is None or a.action == "add_replicas":
            continue
        now, then = float(a.current.split()[0]), float(a.suggested)
        if a.action.startswith("raise_"):
            assert then > now, a
        elif a.action.startswith("lower_"):
            assert then < now, a
    assert [a.rank for a in report.advice] == list(range(1, len(report.advice) + 1))
    if float(config.get("gpu_memory_utilization", "0.9")) >= 0.95:
        assert all(a.action != "raise_gpu_memory_utilization" for a in report.advice)


def test_aggregated_engine_lines_are_not_counted_twice() -> None:
    rows = [stat(i * 10, running=10, waiting=1, kv=0.5, engine=0) for i in range(6)]
    rows += [stat(i * 10, running=20, waiting=2, kv=0.9, engine=1) for i in range(6)]
    rows += [stat(i * 10, running=30, waiting=3, kv=0.7, engine=None) for i in range(6)]
    report = run(logs=[logframes(rows)])
    assert report.windows[0].running_max == 30 and report.windows[0].waiting_max == 3
    alone = run(logs=[logframes([stat(i * 10, running=30, waiting=3, kv=0.7, engine=None)
                                 for i in range(6)])])  # fmt: skip
    assert alone.windows[0].running_max == 30


def test_v0_swapped_requests_are_likely_preemption() -> None:
    rows = [stat(i * 5, running=30, waiting=5, kv=0.9, era="v0") for i in range(36)]
    for r in rows[12:]:
        r["swapped"] = 7
    report = run(logs=[logframes(rows, era="v0", version="0.5.4")])
    likely = [w for w in report.windows if w.likely_preempting]
    assert len(likely) == 2  # windows 1 and 2 (from t=60 s)
    assert all(w.preemption_quality == "lower_bound" and w.preemptions == 0 for w in likely)
    assert report.verdict.state == "over_capacity"
    # A V0 log that does not say its version may predate the warning (v0.4.3): no count.
    unknown = run(logs=[logframes(rows, era="v0")])
    assert all(w.preemptions is None for w in unknown.windows)
    assert unknown.preemptions.total is None
    assert unknown.verdict.state == "over_capacity"  # the swapped requests still tell


def test_utilization_advice_sizes_the_kv_from_logged_memory() -> None:
    # A10G-like: 14.96 GiB weights, 3.24 GiB KV = 26,560 tokens at 0.9 (V1 logs no GPU total)
    kv = [
        ("model_weights", 14.96, "GiB", None),
        ("available_kv_memory", 3.24, "GiB", None),
        ("kv_cache_tokens", 26_560, "tokens", None),
    ]
    rows = [stat(i * 10, running=23, waiting=9, kv=0.99, preemptions=2) for i in range(60)]
    reqs = [request(t, 30.0, prompt=1000, output=358) for t in range(0, 600, 2)]
    report = run(
        logs=[logframes(rows, config={"gpu_memory_utilization": "0.9"}, kv=kv)],
        latencies=latencies_frame(reqs),
    )
    first = report.advice[0]
    assert first.action == "raise_gpu_memory_utilization" and first.current == "0.90"
    # peak demand 23 x 1,358 = 31,234 tokens; each 0.01 of 22.0 GiB holds ~1,803 tokens
    assert first.suggested == "0.93"
    assert "22.0 GiB per GPU (estimated" in first.reason
    assert "31,234 tokens" in first.reason
