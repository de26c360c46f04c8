"""`preemptscope parse`: the JSON Lines contract, the table, Parquet for DuckDB, inputs."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from preemptscope.ingest.logs import iter_log_paths, parse_path

from preemptscope.cli import main
from preemptscope.errors import InputError

from .conftest import CORPUS, ERA_LOGS

CONTRACT_KEYS = {
    "path",
    "deployment",
    "lines",
    "parsed_lines",
    "unrecognized_lines",
    "blank_lines",
    "vllm_version",
    "log_era",
    "timezone",
    "year_source",
    "first_timestamp",
    "last_timestamp",
    "records",
    "preemptions",
    "last_scheduler_stats",
}
RECORD_KEYS = {
    "preemption_warning",
    "scheduler_stats",
    "kv_capacity",
    "config",
    "requests",
    "access",
    "other",
    "unrecognized",
}
LAST_KEYS = {"timestamp", "running", "waiting", "swapped", "gpu_kv_cache_usage"}


def _json_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    assert main(["parse", *argv]) == 0
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


def test_json_lines_contract(capsys: pytest.CaptureFixture[str]) -> None:
    v0 = ERA_LOGS / "v0_6_preemption.log"
    v1 = ERA_LOGS / "v1_v010_docker.log"
    first, second = _json_lines(capsys, str(v0), f"{v1}=prod-a", "--json", "--year", "2024")
    for item in (first, second):
        assert set(item) == CONTRACT_KEYS
        assert isinstance(item["records"], dict) and set(item["records"]) == RECORD_KEYS
    assert first["path"] == str(v0) and first["deployment"] == "v0_6_preemption"
    assert first["lines"] == 22 and first["unrecognized_lines"] == 0
    assert (first["vllm_version"], first["log_era"]) == ("0.6.3.post1", "v0")
    assert first["preemptions"] == {
        "warning_lines": 6,
        "reconstructed_total": 152,
        "basis": "v0_warning_counter",
    }
    last = first["last_scheduler_stats"]
    assert isinstance(last, dict) and set(last) >= LAST_KEYS
    assert (last["running"], last["waiting"], last["swapped"]) == (90, 40, 6)
    assert last["gpu_kv_cache_usage"] == pytest.approx(0.987)
    assert last["timestamp"] == "2024-05-01T09:41:15Z"
    # V1 without `Preemptions:`: no count in this log, never 0.
    assert second["deployment"] == "prod-a"
    assert second["preemptions"] == {
        "warning_lines": 0,
        "reconstructed_total": None,
        "basis": "none",
    }
    assert second["year_source"] == "wrapper"
    records = second["records"]
    assert isinstance(records, dict) and records["access"] == 3


def test_json_equals_library_counts(capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "034-v010-docker-ts-wrapped-stats-kv-99pct.log"
    (item,) = _json_lines(capsys, str(path), "--json")
    frames = parse_path(path)
    assert item["records"] == frames.record_counts()
    assert item["last_scheduler_stats"] is not None


def test_stdin_and_gzip(tmp_path: Path) -> None:
    source = ERA_LOGS / "v0_6_preemption.log"
    packed = tmp_path / "prod.log.gz"
    packed.write_bytes(gzip.compress(source.read_bytes()))
    result = subprocess.run(
        [sys.executable, "-m", "preemptscope", "parse", "-", str(packed), "--json"],
        input=source.read_bytes(),
        capture_output=True,
        check=True,
    )
    stdin_item, gz_item = (json.loads(line) for line in result.stdout.splitlines())
    assert stdin_item["path"] == "-" and stdin_item["deployment"] == "stdin"
    assert gz_item["deployment"] == "prod"
    assert stdin_item["records"] == gz_item["records"]
    assert result.stderr == b""  # no progress bar when stderr is not a TTY


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(ERA_LOGS / "v0_6_preemption.log"), "--year", "2024"]) == 0
    out = capsys.readouterr().out
    assert "152" in out and "0.6.3.post1" in out


def test_unreadable_input_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.log"
    assert main(["parse", str(missing), "--json"]) == 2
    assert str(missing) in capsys.readouterr().err
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with pytest.raises(InputError, match=r"broken\.log\.gz"):
        parse_path(broken)


def test_bad_options_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(ERA_LOGS / "year_rollover.log")
    assert main(["parse", path, "--tz", "Nowhere/City"]) == 2
    assert "Nowhere/City" in capsys.readouterr().err
    assert main(["parse", path, "--start", "yesterday"]) == 2


def test_iter_log_paths(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    shutil.copy(ERA_LOGS / "year_rollover.log", tmp_path / "a" / "one.log")
    shutil.copy(ERA_LOGS / "year_rollover.log", tmp_path / "two.log")
    (tmp_path / "README.md").write_text("notes")
    (tmp_path / "a" / "metrics-1768485615.prom").write_text("vllm:num_preemptions_total 3\n")
    found = list(iter_log_paths([str(tmp_path), f"{tmp_path}/*.log=fleet", "-"]))
    assert found == [
        (str(tmp_path / "a" / "one.log"), None),
        (str(tmp_path / "two.log"), None),
        (str(tmp_path / "two.log"), "fleet"),
        ("-", None),
    ]
    with pytest.raises(InputError, match="no such file"):
        list(iter_log_paths([str(tmp_path / "missing*.log")]))


def test_parquet_out_queried_with_duckdb(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    argv = [
        "parse",
        f"{ERA_LOGS / 'v0_6_preemption.log'}=prod",
        f"{ERA_LOGS / 'v1_v010_docker.log'}=canary",
        "--out",
        str(out),
        "--year",
        "2024",
        "--quiet",
    ]
    assert main(argv) == 0
    con = duckdb.connect()
    stats = con.execute(
        "SELECT deployment, CAST(date AS VARCHAR), count(*), max(gpu_kv_cache_usage) "
        f"FROM read_parquet('{out}/scheduler_stats/**/*.parquet', hive_partitioning = true) "
        "GROUP BY ALL ORDER BY deployment"
    ).fetchall()
    assert stats == [
        ("canary", "2025-10-03", 1, pytest.approx(0.971)),
        ("prod", "2024-05-01", 2, pytest.approx(0.994)),
    ]
    total = con.execute(
        "SELECT max(cumulative) FROM read_parquet("
        f"'{out}/preemption_warning/**/*.parquet', hive_partitioning = true) "
        "WHERE deployment = 'prod'"
    ).fetchone()
    assert total == (101,)
    # Access lines carry no time of their own: the NULL date partition.
    access = con.execute(
        "SELECT count(*), count(date) FROM read_parquet("
        f"'{out}/access/**/*.parquet', hive_partitioning = true) WHERE deployment = 'canary'"
    ).fetchone()
    assert access == (3, 3)  # docker timestamps give them a date here
