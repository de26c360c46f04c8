"""`report --html` writes through a temporary file that cannot be planted (issue 14)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def test_html_report_ignores_a_planted_temporary_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "report.html"
    # The old predictable name: writing through it would have overwritten the victim.
    (tmp_path / ".report.html.tmp").symlink_to(victim)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "preemptscope",
            "report",
            str(FIXTURES / "v0-over-capacity.log"),
            "--html",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious\n"
    assert out.is_file() and not out.is_symlink()
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == [".report.html.tmp", "report.html", "victim.txt"]
