"""Headless Debian chromium through Playwright, with every request and console error recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # required as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # WebGL traces need a GL context even without a GPU.
    "--enable-unsafe-swiftshader",
    "--use-angle=swiftshader",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@dataclass
class Watched:
    """A page plus what it asked for and what it complained about."""

    page: Any
    urls: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def foreign_requests(self) -> list[str]:
        """Requests that would leave the machine: all but file:, data:, blob: and 127.0.0.1."""
        out = []
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme in ("file", "data", "blob", "about"):
                continue
            if parts.scheme in ("http", "https", "ws") and parts.hostname == "127.0.0.1":
                continue
            out.append(url)
        return out

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), full_page=True)
        return path


def plotted(page: Any) -> list[dict[str, Any]]:
    """Every rendered Plotly graph div: id and trace/point counts, read from the live DOM."""
    result: list[dict[str, Any]] = page.evaluate(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(div => ({
            id: div.id,
            traces: (div.data || []).length,
            points: (div.data || []).reduce((n, t) => n + ((t.y || []).length), 0),
            gl: div.querySelectorAll('canvas').length,
            svg: div.querySelectorAll('.main-svg').length,
        }))"""
    )
    return result
