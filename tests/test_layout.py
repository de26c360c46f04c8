"""The installed layout: four folders under one import name, one console script."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from preemptscope.errors import InputError, PreemptscopeError


@pytest.mark.parametrize("name", ["ingest", "analysis", "exporter", "dashboards", "analysis.sim"])
def test_folders_import_under_one_name(name: str) -> None:
    module = importlib.import_module(f"preemptscope.{name}")
    assert module.__name__ == f"preemptscope.{name}"


def test_no_generic_top_level_names_installed() -> None:
    for generic in ("ingest", "analysis", "exporter", "dashboards"):
        spec = importlib.util.find_spec(generic)
        # Running from the checkout puts it on sys.path; what matters is that the
        # installed distribution does not provide these names.
        assert spec is None or "site-packages" not in (spec.origin or "")


def test_input_error_names_file_line_and_reason() -> None:
    error = InputError("logs/a.log", "expected a number", line=12)
    assert isinstance(error, PreemptscopeError)
    assert str(error) == "logs/a.log:12: expected a number"


def test_console_script_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "preemptscope", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    for command in ("demo", "parse", "report", "capacity", "whatif", "scrape", "serve"):
        assert command in result.stdout


# Data flows one way: ingest -> analysis -> dashboards -> exporter. A room imports only the
# rooms before it (and `preemptscope.errors`, `preemptscope.settings` where named), so each can
# be read, tested and replaced without the ones after it. Type-only imports (under
# `if TYPE_CHECKING:`) name a type and load nothing, so they are not counted.
ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "ingest": ("preemptscope.ingest", "preemptscope.errors"),
    "analysis": ("preemptscope.ingest", "preemptscope.analysis", "preemptscope.errors"),
    "dashboards": (
        "preemptscope.ingest",
        "preemptscope.analysis",
        "preemptscope.dashboards",
        "preemptscope.errors",
    ),
}


def _runtime_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return [name for name in names if name == "preemptscope" or name.startswith("preemptscope.")]


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_imports_point_one_way(room: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / room).rglob("*.py"))
        for name in _runtime_imports(path)
        if not any(name == ok or name.startswith(ok + ".") for ok in ALLOWED[room])
    ]
    assert wrong == []


def test_type_only_import_is_seen_as_such(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from preemptscope.errors import InputError\n"
        "if TYPE_CHECKING:\n    from preemptscope.analysis.windows import MetricWindows\n"
        "import preemptscope.exporter.app\n",
        encoding="utf-8",
    )
    assert _runtime_imports(source) == ["preemptscope.errors", "preemptscope.exporter.app"]


def test_every_module_has_its_line_in_the_architecture() -> None:
    """docs/architecture.md is the map a newcomer reads: one line per module (the CLI's
    subcommands are one line for all)."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(root))
        for folder in ("ingest", "analysis", "exporter", "dashboards", "preemptscope")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and "commands" not in path.parts
        and f"`{path.name}`" not in text
    ]
    assert missing == []
