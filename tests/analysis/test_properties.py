"""Invariants of the window arithmetic, over generated inputs."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.windows import v0_warning_windows

from .builders import logframes, metrics_frame, sample, stat, warning

P = AnalysisParams()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 600), st.integers(1, 400)), min_size=1, max_size=12),
    st.sets(st.integers(0, 20)),
)
def test_v0_spread_keeps_every_counted_preemption(
    steps: list[tuple[int, int]], full: set[int]
) -> None:
    """Placed preemptions = sum over runs of (last - first + 1), whatever the KV pattern."""
    t, cumulative, rows, expected, run_first, last = 0, 0, [], 0, None, None
    for gap, add in steps:
        t += gap
        # now and then the engine restarts: the counter starts over (a restart is only visible
        # when the counter does not go up, which is what the analysis relies on)
        restart = add > 300 and cumulative > 0
        cumulative = 1 + add % cumulative if restart else cumulative + add
        rows.append(warning(t, cumulative))
        if run_first is None or restart:
            if run_first is not None and last is not None:
                expected += last - run_first + 1
            run_first = cumulative
        last = cumulative
    assert run_first is not None and last is not None
    expected += last - run_first + 1
    base = rows[0]["timestamp"].timestamp() // 60
    counts, v0 = v0_warning_windows(
        logframes([], rows)["preemption_warning"], P, {int(base) + w for w in full}
    )
    assert sum(counts.values()) == v0.placed == expected
    assert all(c >= 0 for c in counts.values())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=2, max_size=30), st.integers(0, 29))
def test_metrics_counter_total_is_the_sum_of_increases(steps: list[int], reset_at: int) -> None:
    values, value = [], 0
    expected = 0
    for i, step in enumerate(steps):
        if i == reset_at and i > 0 and value > 0:
            value = min(step, value - 1)  # restart: visible as a drop, counted from zero
            expected += value
        else:
            value += step
            expected += step if i > 0 else 0
        values.append(value)
    rows = [sample(i * 20 + 7, "num_preemptions", float(v), kind="counter") for i, v in
            enumerate(values)]  # fmt: skip
    report = analyze([DeploymentInputs("d", metrics=metrics_frame(rows))])
    pre = report.deployments[0].preemptions
    assert pre.total == expected
    assert sum(w.preemptions or 0 for w in report.deployments[0].windows) == expected


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 300),
            st.integers(0, 500),
            st.floats(0, 1),
            st.one_of(st.none(), st.integers(0, 20)),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_any_stats_give_strict_json_and_a_known_state(
    rows: list[tuple[int, int, float, int | None]],
) -> None:
    stats = [
        stat(i * 10, running=r, waiting=w, kv=kv, preemptions=p)
        for i, (r, w, kv, p) in enumerate(rows)
    ]
    report = analyze([DeploymentInputs("d", logs=[logframes(stats)])])
    data = report.to_dict()
    json.dumps(data, allow_nan=False)
    dep = report.deployments[0]
    assert dep.verdict.state in ("ok", "at_risk", "over_capacity", "insufficient_data")
    for w in dep.windows:
        assert not (w.idle and w.over_capacity)
        assert not (w.forced_preemptions and w.over_capacity)
        assert not (w.queue_bound and w.over_capacity)
        if w.likely_preempting:
            assert w.preemptions is None or w.preemption_quality != "exact"
