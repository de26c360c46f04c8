"""Per priority class tables and the what-if sweep's label in the HTML report, in a real
headless Chromium: the numbers shown are the ones handed in (the JSON's), nothing leaks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from preemptscope.analysis.report import Advice
from preemptscope.dashboards.html import plotly_js, render_report_html, write_report_html
from preemptscope.dashboards.predicted import advice_classes_html, classes_table, sweep_html

from tests.dashboards.conftest import Watched
from tests.dashboards.server import TOKEN, Holder, make_app, serve
from tests.dashboards.synthetic import XSS, make_report

Classes = dict[str, dict[str, float | int | None]]
NOW: Classes = {
    "0": {"requests": 73, "e2e_p99": 82.734, "ttft_p99": 78.5, "preemptions": 41},
    "1": {"requests": 147, "e2e_p99": 94.39, "ttft_p99": None, "preemptions": 66},
}
NEW: Classes = {
    "0": {"requests": 73, "e2e_p99": 7.14, "ttft_p99": 0.76, "preemptions": 0},
    "1": {"requests": 147, "e2e_p99": 197.5, "ttft_p99": 86.1, "preemptions": 84},
}

OBSERVED: Classes = {"0": {"requests": 73, "e2e_p99": 76.44}}


def _report(*, hostile: bool = False) -> Any:
    report = make_report(60, hostile=hostile)
    dep = report.deployments[0]
    advice = [
        dataclasses.replace(
            dep.advice[0],
            predicted={
                "now": {"preemptions": 107, "per_priority": NOW},
                "with_change": {"preemptions": 84, "per_priority": NEW},
            },
        ),
        dep.advice[1],  # not replayed: no row
    ]
    dep = dataclasses.replace(dep, advice=advice)
    return dataclasses.replace(report, deployments=[dep])


def _sweep(label: str = "Verified: the replay of now matches 330 tok/s vs 342 observed") -> Any:
    return {
        "label": label,
        "verified": label.startswith("Verified"),
        "calibration": "closed loop over 5 replays of now (costs x0.77, per step x1.00, "
        "per prefill token x1.00)",
        "sharing": "The replay's prefix-cache hit rate is 81%, the deployment's 85% <b>",
        "classes": [("observed", OBSERVED),
                    ("max_num_seqs 32 (now)", NOW), ("max_num_seqs 64", NEW)],
    }  # fmt: skip


def test_tables_show_the_values_given_and_no_count_as_a_dash() -> None:
    text = classes_table([("now", NOW)], kind="advice")
    assert text.count("<tr data-setting") == 2
    assert ">82.73 s<" in text and ">41<" in text and ">147<" in text
    assert ">—<" in text  # class 1's TTFT p99 is unknown: a dash, never 0
    assert classes_table([], kind="sweep") == ""
    # No classes in the data (no per_priority in predicted): no section at all.
    assert advice_classes_html(make_report(10).deployments[0]) == ""
    section = advice_classes_html(_report().deployments[0])
    assert "now (replayed)" in section and "#2 --max-num-seqs 48" in section
    assert ">198 s<" in section  # 197.5 s, at 100 s and over shown to the second
    # Observed rows carry no preemption count: "—".
    observed = sweep_html(_sweep()).split('data-setting="observed"', 1)[1].split("</tr>")[0]
    assert '<td class="num" data-key="preemptions">—</td>' in observed


def test_labels_and_settings_are_escaped() -> None:
    hostile = sweep_html(_sweep(f"Unverified: {XSS}"))
    assert XSS not in hostile and "&lt;" in hostile
    assert 'data-verified="false"' in hostile
    table = classes_table([(XSS, {XSS: {"requests": 1}})], kind="x")
    assert XSS not in table


@pytest.mark.integration
def test_per_class_tables_render_in_chromium(tmp_path: Path, watched: Watched) -> None:
    report = _report(hostile=True)
    name = report.deployments[0].name
    path = tmp_path / "report.html"
    write_report_html(
        report, path, whatif={name: [(8, 3.0, 120.0), (32, 107.0, 92.0)]}, sweeps={name: _sweep()}
    )
    text = render_report_html(report, sweeps={name: _sweep()}).replace(plotly_js(), "")
    assert XSS not in text
    page = watched.page
    page.goto(path.as_uri())
    page.wait_for_function("window.__preemptscopeRendered !== undefined", timeout=30_000)
    advice = page.locator('table.classes[data-kind="advice"]')
    sweep = page.locator('table.classes[data-kind="sweep"]')
    assert advice.is_visible() and sweep.is_visible()
    cells = advice.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    assert cells == [
        ["now (replayed)", "0", "73", "82.73 s", "78.50 s", "41"],
        ["", "1", "147", "94.39 s", "—", "66"],
        ["#2 --max-num-seqs 48", "0", "73", "7.14 s", "0.76 s", "0"],
        ["", "1", "147", "198 s", "86.10 s", "84"],
    ]
    assert sweep.locator("tbody tr").count() == 5
    label = page.locator("section.whatif-sweep .whatif-label").text_content()
    assert label == "Verified: the replay of now matches 330 tok/s vs 342 observed."
    sharing = page.locator("section.whatif-sweep .whatif-sharing").text_content()
    assert sharing == "The replay's prefix-cache hit rate is 81%, the deployment's 85% <b>."
    # Within the panel: the tables scroll inside it rather than push the page wider.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("window.__xss") is None
    assert watched.console_errors == []
    assert watched.foreign_requests() == []
    watched.screenshot("report-classes.png")


@pytest.mark.integration
def test_the_live_page_shows_the_per_class_table(watched: Watched) -> None:
    report = _report(hostile=True)
    with serve(make_app(Holder(report), token=True)) as base:
        page = watched.page
        page.goto(f"{base}/?token={TOKEN}")
        page.locator("ul.deployments a").first.click()
        page.wait_for_function("window.__preemptscopeUpdates >= 1 && document.body.dataset.windows")
        table = page.locator('#card table.classes[data-kind="advice"]')
        assert table.is_visible()
        cells = table.locator("tbody tr").evaluate_all(
            "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))"
        )
        assert cells[0] == ["now (replayed)", "0", "73", "82.73 s", "78.50 s", "41"]
        assert cells[3] == ["", "1", "147", "198 s", "86.10 s", "84"]
        assert page.evaluate("window.__xss") is None
        assert watched.console_errors == []
        assert watched.foreign_requests() == []


def test_advice_without_prediction_adds_nothing() -> None:
    dep = make_report(10).deployments[0]
    dep = dataclasses.replace(dep, advice=[Advice(1, "a", None, None, None, "why")])
    assert advice_classes_html(dep) == ""
