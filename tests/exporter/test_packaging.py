"""The package as pip builds it: no setuptools warning, every package-data glob points at files
that exist, and the wheel holds the data the service and the compose file need."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _setuptools_version() -> tuple[int, ...]:
    try:
        from importlib.metadata import version

        return tuple(int(p) for p in version("setuptools").split(".")[:2])
    except Exception:
        return (0,)


def test_build_requirements_match_the_metadata() -> None:
    requires = PYPROJECT["build-system"]["requires"]
    # `license = "Apache-2.0"` (an SPDX expression, PEP 639) needs setuptools 77.
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert any(r.replace(" ", "").startswith("setuptools>=") for r in requires)
    floor = next(r for r in requires if r.startswith("setuptools"))
    assert tuple(int(p) for p in floor.split(">=")[1].split(".")[:1]) >= (77,)


def _package_dir(package: str) -> Path:
    mapping: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
    return ROOT / mapping.get(package, package.replace(".", "/"))


def test_every_package_data_glob_matches_files() -> None:
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    for package, globs in data.items():
        assert package in packages, package
        for pattern in globs:
            found = [p for p in _package_dir(package).glob(pattern) if p.is_file()]
            assert found, f"{package}: {pattern!r} matches no file"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    if _setuptools_version() < (77,):
        pytest.skip(
            "setuptools>=77 not installed (pip install -e '.[dev]'); build offline needs it"
        )
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: nothing is downloaded; the venv's setuptools builds.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",
            "-w",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = out.glob("preemptscope-*.whl")
    return built, done.stdout + done.stderr


def test_wheel_builds_without_warnings(wheel: tuple[Path, str]) -> None:
    _, output = wheel
    assert "absent from the `packages` configuration" not in output
    assert "SetuptoolsDeprecationWarning" not in output
    assert "_Warning" not in output


def test_wheel_holds_the_data(wheel: tuple[Path, str]) -> None:
    built, _ = wheel
    names = set(zipfile.ZipFile(built).namelist())
    base = "preemptscope/dashboards/"
    for needed in (
        "preemptscope/py.typed",
        base + "static/live.js",
        base + "static/plots.js",
        base + "static/style.css",
        base + "prometheus/rules.yml",
        base + "prometheus/prometheus.yml",
        base + "grafana/preemptscope.json",
        base + "grafana/provisioning/dashboards/preemptscope.yml",
        base + "grafana/provisioning/datasources/prometheus.yml",
        "preemptscope/exporter/app.py",
        "preemptscope/analysis/sim/__init__.py",
    ):
        assert needed in names, needed
    # Nothing from outside the four package folders (tests, docs, the venv) is shipped.
    assert not [n for n in names if n.startswith(("tests/", "docs/", ".venv", "bench/"))]
