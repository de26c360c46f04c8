"""Regenerate docs/img/report.png: the demo's HTML report, in headless chromium.

Runs `preemptscope demo` (simulated over-capacity deployment, 40 min of traffic, 30-s windows),
opens its report offline and captures the page top: header, verdict card and timeline.
Run from the repository root:  python bench/report_screenshot.py [--out docs/img/report.png]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import sync_playwright

from tests.dashboards.conftest import CHROMIUM, CHROMIUM_ARGS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="docs/img/report.png")
    parser.add_argument("--duration", default="40m")
    # 30-s windows hold two /metrics scrapes (15 s apart), so the inter-token latency histogram
    # has a p99 in every window and the correlation can use it.
    parser.add_argument("--window", default="30s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "demo-output" / "report.html"
        # Run where a user would: the report names the files as `demo-output/...`, not /tmp/...
        subprocess.run(
            [
                sys.executable,
                "-m",
                "preemptscope",
                "demo",
                "--out",
                "demo-output",
                "--duration",
                args.duration,
                "--window",
                args.window,
                "--html",
                str(html),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=tmp,
        )
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(html.as_uri())
                page.wait_for_function(
                    "window.__preemptscopeRendered !== undefined", timeout=60_000
                )
                # Page top down to the end of the first deployment's timeline.
                box = page.locator("#fig-0-timeline").bounding_box()
                assert box is not None
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(
                    path=args.out,
                    full_page=True,
                    clip={"x": 0, "y": 0, "width": 1400, "height": box["y"] + box["height"]},
                )
            finally:
                browser.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
