"""Gauges of complete windows (issue 25): through many window boundaries no window series
vanishes and none changes inside a window; the live page (real headless Chromium) shows the
last complete window beside the one filling."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.conftest import Watched
from tests.exporter.conftest import metric_value, running_service, wait_for
from tests.exporter.test_restart import demo_server

pytestmark = pytest.mark.slow

WINDOW_S = 2.0
GAUGES = (
    "preemptscope_window_preemptions",
    "preemptscope_window_over_capacity",
    "preemptscope_kv_cache_usage_max_ratio",
    "preemptscope_requests_waiting",
    "preemptscope_window_end_timestamp_seconds",
)


def test_no_window_series_vanishes_or_swings_within_a_window(tmp_path: Path) -> None:
    with demo_server() as fake:
        argv = (
            "--scrape", f"{fake}/overloaded/metrics=over", "--scrape-interval", "0.5s",
            "--window", f"{WINDOW_S:g}s", "--analysis-interval", "0.2s",
        )  # fmt: skip
        with running_service(tmp_path / "state", *argv) as live, live.client() as client:

            def read() -> dict[str, float | None]:
                text = client.get("/metrics").text
                return {name: metric_value(text, name, deployment="over") for name in GAUGES}

            wait_for(lambda: all(v is not None for v in read().values()), timeout=30)
            samples: list[tuple[float, dict[str, float | None]]] = []
            started = time.time()
            while time.time() - started < 5 * WINDOW_S:  # five boundaries at least
                samples.append((time.time(), read()))
                time.sleep(0.1)
    assert len(samples) > 20
    for name in GAUGES:
        present = [values[name] is not None for _, values in samples]
        assert all(present), f"{name} vanished in {present.count(False)} of {len(present)}"
        # A value changes only across a boundary: at most once per window.
        windows_seen = {int(at // WINDOW_S) for at, _ in samples}
        changes = sum(1 for a, b in itertools.pairwise(samples) if a[1][name] != b[1][name])
        assert changes <= len(windows_seen), (name, changes, len(windows_seen))
    # The gauges describe a window that has ended, on the window grid.
    for at, values in samples:
        end = values["preemptscope_window_end_timestamp_seconds"]
        assert end is not None and end <= at and end % WINDOW_S == 0, (at, end)


def test_the_live_page_shows_the_complete_window_beside_the_filling_one(
    tmp_path: Path,
    watched: Watched,
) -> None:
    with demo_server() as fake:
        argv = (
            "--scrape", f"{fake}/overloaded/metrics=over", "--scrape-interval", "0.5s",
            "--window", "3s",
        )  # fmt: skip
        with running_service(tmp_path / "state", *argv) as live:
            with live.client() as client:
                wait_for(
                    lambda: (
                        metric_value(
                            client.get("/metrics").text,
                            "preemptscope_window_preemptions",
                            deployment="over",
                        )
                        is not None
                    ),
                    timeout=30,
                )
            page: Any = watched.page
            page.goto(f"{live.url}/deployments/over")
            page.wait_for_function(
                "!document.getElementById('windows-now').hidden"
                " && document.querySelectorAll('#windows-now tbody tr').length === 2",
                timeout=30_000,
            )
            rows = page.locator("#windows-now tbody tr")
            kinds = [rows.nth(i).get_attribute("data-window") for i in range(2)]
            complete = rows.nth(0).locator("td").all_inner_texts()
            filling = rows.nth(1).locator("td").all_inner_texts()
    assert kinds == ["complete", "filling"]
    assert complete[0] == "last complete" and complete[1] != "no data"
    assert int(complete[2]) >= 0  # a preemption count, from vLLM's counter
    assert complete[3].endswith("%")
    assert filling[0] == "filling"
    assert watched.console_errors == []
    assert watched.foreign_requests() == []
