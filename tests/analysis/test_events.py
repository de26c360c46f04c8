"""Restarts and config changes (DeploymentReport.events) from logs and /metrics."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from preemptscope.analysis.analyze import DeploymentInputs, analyze, analyze_deployment
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import DeploymentReport, Event
from preemptscope.analysis.sim import writers
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.scenarios import demo_scenarios
from preemptscope.ingest.logs import ParseOptions, parse_lines
from preemptscope.ingest.schema import LogFrames

from .builders import (
    at,
    config_frame,
    logframes,
    metrics_frame,
    sample,
    setting,
    stat,
    warning,
)


def _run(
    lf: LogFrames | None = None,
    metrics: list[dict[str, object]] | None = None,
    params: AnalysisParams | None = None,
) -> DeploymentReport:
    inputs = DeploymentInputs(
        "d",
        logs=[lf] if lf is not None else [],
        metrics=metrics_frame(metrics) if metrics is not None else None,
    )
    return analyze_deployment(inputs, params or AnalysisParams())


def _startup(
    t: float, line: int, max_num_seqs: str, version: str = "0.11.0"
) -> list[dict[str, object]]:
    return [
        setting(t, "vllm_version", version, line=line, origin="version_line"),
        setting(t, "max_num_seqs", max_num_seqs, line=line + 1),
        setting(t, "dtype", "auto", line=line + 1),
        # The engine config prints the same settings in its own words: not a change.
        setting(t + 2, "dtype", "torch.bfloat16", line=line + 2, origin="engine_config"),
        setting(t + 2, "max_num_seqs", max_num_seqs, line=line + 2, origin="engine_config"),
        setting(t + 2, "vllm_version", version, line=line + 2, origin="engine_config"),
    ]


def _busy(times: range) -> list[dict[str, object]]:
    return [stat(t, running=8, waiting=0, kv=0.4) for t in times]


def test_restart_with_a_new_max_num_seqs_gives_a_restart_and_a_config_change() -> None:
    lf = logframes(_busy(range(10, 300, 10)) + _busy(range(320, 600, 10)))
    lf.frames["config"] = config_frame(_startup(0, 1, "256") + _startup(305, 305, "128"))
    dep = _run(lf)
    assert dep.events == [
        Event(at(305), "restart", "vLLM restarted: a new startup in vllm.log (vLLM 0.11.0)"),
        Event(at(305), "config_change", "max_num_seqs 256 → 128"),
    ]
    # The capacity facts keep the last startup's value.
    assert dep.capacity.max_num_seqs == 128


def test_one_startup_and_a_log_without_startup_lines_have_no_events() -> None:
    lf = logframes(_busy(range(10, 600, 10)))
    lf.frames["config"] = config_frame(_startup(0, 1, "256"))
    assert _run(lf).events == []
    assert _run(logframes(_busy(range(10, 600, 10)))).events == []


def test_a_log_that_begins_mid_run_then_restarts_shows_the_restart() -> None:
    lf = logframes(_busy(range(10, 600, 10)))
    lf.frames["config"] = config_frame(_startup(305, 305, "128"))
    assert [e.kind for e in _run(lf).events] == ["restart"]


def test_a_version_upgrade_and_several_restarts_are_each_an_event_in_time_order() -> None:
    lf = logframes(
        _busy(range(10, 300, 10)) + _busy(range(320, 600, 10)) + _busy(range(620, 900, 10))
    )
    lf.frames["config"] = config_frame(
        _startup(0, 1, "256", "0.10.0")
        + _startup(305, 305, "128", "0.11.0")
        + _startup(605, 605, "256", "0.11.0")
    )
    events = _run(lf).events
    assert [(e.time, e.kind, e.message) for e in events] == [
        (at(305), "restart", "vLLM restarted: a new startup in vllm.log (vLLM 0.11.0)"),
        (at(305), "config_change", "max_num_seqs 256 → 128"),
        (at(305), "config_change", "vllm_version 0.10.0 → 0.11.0"),
        (at(605), "restart", "vLLM restarted: a new startup in vllm.log (vLLM 0.11.0)"),
        (at(605), "config_change", "max_num_seqs 128 → 256"),
    ]


def _counters(
    t: float, preemptions: float, success: float, created: float = 1.0
) -> list[dict[str, object]]:
    rows = []
    for name, value in (("num_preemptions", preemptions), ("request_success", success)):
        rows.append(sample(t, name, value, kind="counter"))
        rows.append(sample(t, name, created, kind="counter", sample_kind="created"))
    rows.append(sample(t, "num_requests_running", 4.0))
    return rows


def test_metrics_counters_going_down_are_one_restart_naming_them() -> None:
    rows = [r for i in range(10) for r in _counters(i * 15, 10.0 + i, 100.0 + 10 * i)]
    rows += [r for i in range(10, 20) for r in _counters(i * 15, float(i - 10), float(i - 9), 2.0)]
    events = _run(metrics=rows).events
    assert events == [
        Event(
            at(150),
            "restart",
            "vLLM restarted: /metrics counters reset (num_preemptions, request_success) "
            "in metrics/",
        )
    ]


def test_a_changed_created_sample_is_a_restart_even_when_the_value_is_higher() -> None:
    rows = [r for i in range(5) for r in _counters(i * 15, 1.0, 10.0)]
    rows += [r for i in range(5, 10) for r in _counters(i * 15, 50.0, 500.0, created=9.0)]
    assert [(e.time, e.kind) for e in _run(metrics=rows).events] == [(at(75), "restart")]


def test_v0_counter_drop_is_a_restart_unless_a_startup_line_already_explains_it() -> None:
    stats = [stat(t, running=8, waiting=2, kv=0.99, era="v0") for t in range(10, 600, 10)]
    warnings = [warning(100, 1), warning(200, 51), warning(400, 1), warning(500, 51)]
    lf = logframes(stats, warnings, era="v0")
    assert _run(lf).events == [
        Event(
            at(400),
            "restart",
            "vLLM restarted: the V0 preemption counter fell from 51 to 1 in vllm.log",
        )
    ]
    lf.frames["config"] = config_frame(_startup(0, 1, "256") + _startup(305, 305, "256"))
    assert [(e.time, e.kind) for e in _run(lf).events] == [(at(305), "restart")]


def test_a_log_restart_and_the_metrics_reset_it_caused_are_one_event() -> None:
    lf = logframes(_busy(range(10, 300, 10)) + _busy(range(320, 600, 10)))
    lf.frames["config"] = config_frame(_startup(0, 1, "256") + _startup(305, 305, "256"))
    rows = [r for i in range(21) for r in _counters(i * 15, 5.0 + i, 50.0 + i)]
    rows += [r for i in range(21, 40) for r in _counters(i * 15, float(i - 20), float(i), 3.0)]
    events = _run(lf, rows).events
    assert [(e.time, e.kind) for e in events] == [(at(305), "restart")]


def test_events_outside_the_analysed_span_are_left_out() -> None:
    # The live service keeps startup lines however old; its windows cover only the history.
    lf = logframes(_busy(range(3000, 3600, 10)))
    lf.frames["config"] = config_frame(_startup(0, 1, "256") + _startup(5, 2, "128"))
    lf.frames["scheduler_stats"] = lf.frames["scheduler_stats"].with_columns(
        line=lf.frames["scheduler_stats"]["line"] + 10
    )
    assert _run(lf).events == []


def test_two_simulated_logs_concatenated_show_the_restart_and_the_new_setting() -> None:
    scenario = demo_scenarios(duration=120)[0]
    first = simulate(scenario.workload, scenario.config)
    second = simulate(scenario.workload, dataclasses.replace(scenario.config, max_num_seqs=64))
    start = datetime(2026, 1, 15, 14, 0, tzinfo=UTC)
    later = start + timedelta(minutes=5)
    lines = writers.render_log(first, era="v1", start=start) + writers.render_log(
        second, era="v1", start=later
    )
    frames = parse_lines(lines, source="two.log", deployment="d", options=ParseOptions())
    report = analyze([DeploymentInputs("d", logs=[frames])])
    events = report.deployments[0].events
    assert [(e.kind, e.message) for e in events] == [
        ("restart", "vLLM restarted: a new startup in two.log (vLLM 0.11.0)"),
        ("config_change", "max_num_seqs 128 → 64"),
    ]
    # The restart is the second run's startup: just before its traffic starts.
    assert all(later - timedelta(minutes=1) <= e.time <= later for e in events)
    assert report.to_dict()["deployments"][0]["events"][1] == {
        "time": events[1].time.isoformat(),
        "kind": "config_change",
        "message": "max_num_seqs 128 → 64",
    }
