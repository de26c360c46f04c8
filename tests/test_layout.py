"""The installed layout: four folders under one import name, one console script."""

from __future__ import annotations

import importlib
import subprocess
import sys

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
