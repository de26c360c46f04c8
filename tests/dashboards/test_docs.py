"""docs/dashboards.md says what the code does: the scatter's metric, how the screenshot is made."""

from __future__ import annotations

import re
from pathlib import Path

from preemptscope.analysis.analyze import AnalysisParams

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "dashboards.md").read_text()


def _row(builder: str) -> str:
    (row,) = [line for line in DOC.splitlines() if line.startswith(f"| `{builder}(")]
    return row


def test_the_scatter_row_names_the_correlations_metric_order() -> None:
    row = _row("preemption_vs_tail_figure")
    order = ", ".join(AnalysisParams().latency_preference)
    assert f"`{order}`" in row and "dep.correlation.metric" in row
    assert "end-to-end preferred" not in row


def test_the_screenshot_caption_matches_the_script_that_makes_it() -> None:
    script = (ROOT / "bench" / "report_screenshot.py").read_text()
    duration = re.search(r'"--duration", default="([^"]+)"', script)
    window = re.search(r'"--window", default="([^"]+)"', script)
    width = re.search(r'viewport=\{"width": (\d+)', script)
    assert duration and window and width
    caption = DOC[DOC.index("](img/report.png)") :].split("\n\n")[1]
    assert "python bench/report_screenshot.py" in caption
    assert f"--duration {duration.group(1)}" in caption.replace("\n", " ")
    assert f"--window {window.group(1)}" in caption
    assert f"{width.group(1)} px" in caption
