"""`report ARCHIVE_DIR` reads back what `parse --out` wrote: the verdict of the raw logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from preemptscope.ingest.archive import is_archive, read_archive

from preemptscope.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = [
    FIXTURES / "logs" / "v0_6_preemption.log",
    FIXTURES / "logs" / "v1_v033_envelopes.log",
    FIXTURES / "logs" / "v1_v010_docker.log",
    FIXTURES / "corpus" / "034-v010-docker-ts-wrapped-stats-kv-99pct.log",
]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    result: dict[str, Any] = json.loads(out.out)
    return result


def without_sources(deployment: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in deployment.items() if k != "sources"}


@pytest.fixture
def archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "archive"
    for log in LOGS:
        assert (
            main(["parse", "--year", "2026", f"{log}=ns/{log.stem[:20]}", "--out", str(out)]) == 0
        )
    capsys.readouterr()
    return out


def test_same_report_as_the_raw_logs(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = run_json(
        capsys, "report", "--json", "--year", "2026",
        *(f"{log}=ns/{log.stem[:20]}" for log in LOGS),
    )  # fmt: skip
    back = run_json(capsys, "report", "--json", str(archive))
    assert [without_sources(d) for d in back["deployments"]] == [
        without_sources(d) for d in sorted(raw["deployments"], key=lambda d: d["name"])
    ]
    states = {d["name"]: d["verdict"]["state"] for d in back["deployments"]}
    assert len(states) == len(LOGS) and any(s != "ok" for s in states.values())
    for source in back["sources"]:
        assert source["kind"] == "log" and source["lines"] is None  # not stored: no count


def test_one_deployment_and_a_time_range(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"ns/{LOGS[0].stem[:20]}"
    one = run_json(capsys, "report", "--json", f"{archive}={name}")
    assert [d["name"] for d in one["deployments"]] == [name]
    # Another deployment's files are never opened: the filter prunes partitions.
    for file in archive.glob("*/deployment=ns%2Fv1_v033*/*/*.parquet"):
        file.write_bytes(b"not parquet")
    assert [d["name"] for d in run_json(capsys, "report", "--json", f"{archive}={name}")[
        "deployments"]] == [name]  # fmt: skip
    capsys.readouterr()
    assert main(["report", str(archive)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read the archive" in err[0]
    # The time range: nothing of the log before its first record is kept, all after.
    frames = read_archive(archive, deployments=[name])[name]
    times = frames["scheduler_stats"]["timestamp"].sort()
    middle = times[len(times) // 2]
    late = read_archive(archive, deployments=[name], start=middle)[name]
    assert late["scheduler_stats"]["timestamp"].min() == middle
    assert late["scheduler_stats"].height == len(times) - len(times) // 2


def test_unknown_deployment_and_plain_dirs(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["report", f"{archive}=ns/nope"]) == 2
    err = capsys.readouterr().err
    assert "no deployment ns/nope in the archive" in err and len(err.strip().splitlines()) == 1
    plain = tmp_path / "logs"
    plain.mkdir()
    (plain / "vllm.log").write_text((FIXTURES / "logs" / "v0_6_preemption.log").read_text())
    assert is_archive(archive) and not is_archive(plain) and not is_archive(LOGS[0])
    assert main(["report", "--end", "2026-01-01T00:00:00Z", str(plain)]) == 2
    assert "--end" in capsys.readouterr().err
