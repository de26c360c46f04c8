"""Figure builders, checked on fig.to_dict(): traces, axes and shapes for known inputs."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from preemptscope.analysis.report import DeploymentReport, Event, Window
from preemptscope.dashboards import figures as F

from tests.dashboards.synthetic import START, XSS, latency, make_deployment, make_report


def traces(fig: Any) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in fig.to_dict()["data"] if t.get("name")}


def xs_of(trace: dict[str, Any]) -> list[Any]:
    """The per-point y values that are set, whichever x encoding the trace uses."""
    return [y for y in trace["y"] if y is not None]


def window(i: int, **changes: Any) -> Window:
    start = START + timedelta(seconds=10 * i)
    base = Window(
        start=start,
        end=start + timedelta(seconds=10),
        preemptions=0,
        preemption_quality="exact",
        preemption_source="v1_stats_field",
        likely_preempting=False,
        forced_preemptions=False,
        kv_usage_max=0.5,
        kv_usage_mean=0.4,
        running_mean=10.0,
        running_max=12,
        waiting_mean=0.0,
        waiting_max=0,
        waiting_for_capacity_max=None,
        prompt_throughput=100.0,
        generation_throughput=200.0,
        idle=False,
        over_capacity=False,
        latency={"e2e": latency("e2e", 2.0, 2.5)},
    )
    return replace(base, **changes)


def with_windows(windows: list[Window], **changes: Any) -> DeploymentReport:
    return replace(make_deployment(count=1), windows=windows, episodes=[], **changes)


def test_timeline_has_every_series_on_shared_time_axis() -> None:
    dep = make_deployment(count=360)
    fig = F.timeline_figure(dep)
    data = traces(fig)
    for name in (
        "KV usage max",
        "KV usage mean",
        "running",
        "waiting",
        "preemptions (exact)",
        "end-to-end p99",
        "end-to-end mean",
        "TTFT p99",
        "inter-token p99",
        "inter-token mean",
    ):
        assert name in data, name
    layout = fig.to_dict()["layout"]
    # Four rows, every x axis bound to the bottom one: one time axis.
    assert {layout[f"xaxis{i}"]["matches"] for i in ("", 2, 3)} == {"x4"}
    assert layout["yaxis4"]["type"] == "log"
    assert data["preemptions (exact)"]["type"] == "bar"
    assert [data[n]["yaxis"] for n in ("KV usage max", "running", "end-to-end p99")] == [
        "y",
        "y2",
        "y4",
    ]
    assert data["preemptions (exact)"]["xaxis"] == "x3"
    assert sum(xs_of(data["preemptions (exact)"])) == dep.preemptions.total
    # Regular 10-s windows: x0/dx, not 360 timestamps per trace.
    assert data["running"]["dx"] == 10_000
    assert data["running"]["x0"] == "2026-03-02 00:00:05"


def test_timeline_kv_threshold_lines_and_episode_shading() -> None:
    dep = make_deployment(count=360)
    assert dep.episodes
    shapes = F.timeline_figure(dep).to_dict()["layout"]["shapes"]
    hlines = sorted(s["y0"] for s in shapes if s["type"] == "line")
    assert hlines == [0.9, 0.98]
    rects = [s for s in shapes if s["type"] == "rect"]
    assert len(rects) == len(dep.episodes)
    assert rects[0]["x0"] == F.plot_time(dep.episodes[0].start)
    assert rects[0]["yref"] == "paper"


def test_preemption_quality_is_drawn_apart() -> None:
    ws = [
        window(0, preemptions=3),
        window(1, preemptions=50, preemption_quality="lower_bound"),
        window(2, preemptions=None, preemption_quality="none", likely_preempting=True),
        window(3, preemptions=7, preemption_quality="inferred"),
        window(4, preemptions=40, forced_preemptions=True),
        window(5, preemptions=None, preemption_quality="none"),
    ]
    data = traces(F.timeline_figure(with_windows(ws)))
    assert data["preemptions (exact)"]["y"] == [3, None, None, None, 40, None]
    assert data["preemptions (lower bound)"]["y"] == [None, 50, None, None, None, None]
    assert data["preemptions (lower bound)"]["marker"]["pattern"]["shape"] == "/"
    assert data["preemptions (inferred count)"]["y"] == [None, None, None, 7, None, None]
    # Sparse markers carry only their own windows (midpoints), not a grid of nulls.
    likely = data["likely preempting (inferred, no count)"]
    assert (likely["x"], likely["y"]) == (["2026-03-02 00:00:25"], [0])
    forced = data["forced preemptions (cache reset)"]
    assert (forced["x"], forced["y"]) == (["2026-03-02 00:00:45"], [0])
    # A window without a count (index 5) is never drawn as a zero bar.
    assert all(t["y"][5] is None for t in data.values() if t.get("x0") and "preempt" in t["name"])
    assert all("2026-03-02 00:00:55" not in t.get("x", []) for t in data.values())


def test_bucket_limited_p99_is_marked() -> None:
    ws = [window(0), window(1, latency={"e2e": latency("e2e", 2.0, 9.0, limited=True)})]
    data = traces(F.timeline_figure(with_windows(ws)))
    bound = data["end-to-end p99 is a bucket bound"]
    assert bound["mode"] == "markers"
    assert bound["y"] == [None, 18.0]


def test_gaps_stay_gaps_and_irregular_windows_use_timestamps() -> None:
    gap = [window(0), window(1), window(5)]
    data = traces(F.timeline_figure(with_windows(gap)))
    assert data["running"]["y"] == [10.0, 10.0, None, None, None, 10.0]
    irregular = [window(0), replace(window(1), end=START + timedelta(seconds=25))]
    data = traces(F.timeline_figure(with_windows(irregular)))
    assert data["running"]["x"] == ["2026-03-02 00:00:05", "2026-03-02 00:00:17.500"]


def test_week_of_windows_uses_webgl_and_a_band() -> None:
    dep = make_deployment(count=F.BAR_LIMIT + 1)
    dep = replace(dep, episodes=dep.episodes * (F.SHAPE_LIMIT // max(1, len(dep.episodes)) + 1))
    fig = F.timeline_figure(dep)
    data = traces(fig)
    assert {t["type"] for t in data.values() if t["name"] != "over-capacity episode"} == {
        "scattergl"
    }
    assert data["preemptions (exact)"]["fill"] == "tozeroy"
    assert len(data["running"]["y"]) == F.BAR_LIMIT + 1  # full resolution, nothing dropped
    bound = data["end-to-end p99 is a bucket bound"]  # sparse: its own windows only
    limited = [w for w in dep.windows if w.latency["e2e"].bucket_limited]
    assert len(bound["x"]) == len(bound["y"]) == len(limited) < len(dep.windows) / 4
    assert bound["x"][0] == F.plot_time(limited[0].start + timedelta(seconds=5))
    assert "x0" not in bound
    band = data["over-capacity window"]
    assert band["y"].count(1.05) == sum(w.over_capacity for w in dep.windows)
    assert not [s for s in fig.to_dict()["layout"]["shapes"] if s["type"] == "rect"]


def test_preemption_vs_tail_scatter_and_rho() -> None:
    dep = make_deployment(count=360)
    fig = F.preemption_vs_tail_figure(dep)
    d = fig.to_dict()
    assert "Spearman ρ = 0.81" in d["layout"]["title"]["text"]
    points = sum(len(t["x"]) for t in d["data"])
    assert points == 360
    over = next(t for t in d["data"] if t["name"].startswith("over-capacity"))
    assert min(over["y"]) > 8  # the toy model's over-capacity windows have the fat tail
    assert d["layout"]["xaxis"]["title"]["text"] == "preemptions per minute"


def test_preemption_vs_tail_leaves_out_uncounted_windows() -> None:
    ws = [window(0, preemptions=6), window(1, preemptions=None, preemption_quality="none")]
    d = F.preemption_vs_tail_figure(with_windows(ws)).to_dict()
    assert [t["x"] for t in d["data"]] == [[36.0]]
    assert "1 windows without a preemption count left out" in d["layout"]["title"]["text"]


def test_capacity_without_and_with_whatif() -> None:
    dep = make_deployment(count=360)
    d = F.capacity_figure(dep).to_dict()
    bars = d["data"][0]
    assert bars["orientation"] == "h"
    assert bars["x"][0] == 44.8 and bars["x"][1] == 256
    assert "45,920 tokens (2,870 blocks × 16)" in d["layout"]["title"]["text"]
    points = [F.WhatIfPoint(64, 10.0, 4.0), (256, 900.0, 20.0), (128, 300.0, 9.5)]
    d = F.capacity_figure(dep, points).to_dict()
    pred = next(t for t in d["data"] if t["name"] == "predicted p99 (s)")
    assert pred["x"] == [64, 128, 256] and pred["yaxis"] == "y3"
    assert any(s["type"] == "line" and s["x0"] == 256 for s in d["layout"]["shapes"])


def test_log_text_is_escaped_in_every_figure() -> None:
    dep = make_report(hostile=True).deployments[0]
    for fig in (
        F.timeline_figure(dep),
        F.preemption_vs_tail_figure(dep),
        F.capacity_figure(dep),
    ):
        text = fig.to_json()
        assert "<script" not in text and "<img" not in text
    # Plotly decodes &lt; &gt; &amp; (not &quot;): the payload displays as typed.
    for fig in (F.timeline_figure(dep), F.capacity_figure(dep)):
        assert (
            '&lt;img src=x onerror="window.__xss=1"&gt;'
            in json.loads(fig.to_json())["layout"]["title"]["text"]
        )


def test_verdict_card_escapes_and_ranks_advice() -> None:
    dep = make_report(hostile=True).deployments[0]
    card = F.verdict_card_html(dep)
    assert XSS not in card and "<script" not in card and "<img" not in card
    assert "&lt;img src=x onerror=&quot;window.__xss=1&quot;&gt;" in card
    assert card.index("raise gpu memory utilization") < card.index("lower max num seqs")
    assert "<code>--gpu-memory-utilization</code>" in card and "<b>0.95</b>" in card
    assert 'data-state="over_capacity"' in card


def test_figures_json_restricts_to_range() -> None:
    dep = make_deployment(count=360)
    since = dep.windows[-1].end - timedelta(minutes=10)
    out = F.figures_json(dep, since=since)
    assert out["windows"] == 60
    assert set(out["figures"]) == {"timeline", "preemption_vs_tail", "capacity"}
    running = next(t for t in out["figures"]["timeline"]["data"] if t.get("name") == "running")
    assert len(running["y"]) == 60
    assert (
        "over the whole report" in out["figures"]["preemption_vs_tail"]["layout"]["title"]["text"]
    )


@pytest.mark.parametrize("count", [0, 1])
def test_tiny_inputs_do_not_break(count: int) -> None:
    dep = make_deployment(count=count)
    if count == 0:
        dep = replace(dep, windows=[], episodes=[])
    for fig in (F.timeline_figure(dep), F.preemption_vs_tail_figure(dep), F.capacity_figure(dep)):
        assert fig.to_dict()["data"] is not None
    assert F.figures_json(dep)["windows"] == count


def test_analyzer_extras_are_shown() -> None:
    ws = [window(0), window(1, queue_bound=True, waiting_max=9)]
    dep = with_windows(ws)
    dep = replace(
        dep,
        capacity=replace(dep.capacity, mean_tokens_per_request=1148.0),
        correlation=replace(dep.correlation, spearman_rho_p99=0.66),
        preemptions=replace(dep.preemptions, cache_reset_preemptions=12, since_start=99_999),
    )
    data = traces(F.timeline_figure(dep))
    assert data["saturated (a limit pinned)"]["y"] == [None, 9]
    bars = F.capacity_figure(dep).to_dict()["data"][0]
    assert bars["y"][1] == "KV fits: observed 1,148 tokens/request"
    assert bars["x"][1] == 40.0  # 45,920 / 1,148
    title = F.preemption_vs_tail_figure(dep).to_dict()["layout"]["title"]["text"]
    assert "vs p99 itself = 0.66" in title
    card = F.verdict_card_html(dep)
    assert "12 of them in cache resets" in card and "99,999 since the engine started" in card


def test_simulator_sweep_feeds_the_capacity_figure() -> None:
    from preemptscope.analysis.kvmodel import GPU_PRESETS, MODEL_PRESETS
    from preemptscope.analysis.sim.config import SimConfig
    from preemptscope.analysis.sim.scenarios import chat_traffic
    from preemptscope.analysis.sim.whatif import sweep

    base = SimConfig(model=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS["A10G"])
    outcomes = sweep(
        chat_traffic(rate=1.5, duration=60, seed=1), "max_num_seqs", [8, 64], base=base
    )
    points = F.whatif_points(outcomes)
    assert [p.max_num_seqs for p in points] == [8, 64]
    assert [p.preemptions for p in points] == [float(o.preemptions) for o in outcomes]
    d = F.capacity_figure(make_deployment(count=30), points).to_dict()
    bars = next(t for t in d["data"] if t["name"] == "predicted preemptions")
    assert bars["x"] == [8, 64] and bars["y"] == [p.preemptions for p in points]


def test_restarts_and_config_changes_are_marked() -> None:
    dep = make_deployment(count=60)
    at = dep.windows[10].start
    dep = replace(
        dep,
        events=[
            Event(at, "restart", "engine restarted <b>(counters reset)</b>"),
            Event(at + timedelta(minutes=3), "config_change", "max_num_seqs 256 -> 64"),
        ],
    )
    fig = F.timeline_figure(dep)
    lines = [s for s in fig.to_dict()["layout"]["shapes"] if s.get("name") == "engine restart"]
    assert len(lines) == 1 and lines[0]["x0"] == F.plot_time(at) and lines[0]["yref"] == "paper"
    data = traces(fig)
    assert data["engine restart"]["text"] == [
        "engine restarted &lt;b&gt;(counters reset)&lt;/b&gt;"
    ]
    assert data["config change"]["x"] == [F.plot_time(at + timedelta(minutes=3))]
    assert data["config change"]["yaxis"] == "y"
