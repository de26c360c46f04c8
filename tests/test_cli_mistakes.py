"""A new user's mistakes get one clear line and exit 2, from the real `preemptscope` process."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
LOG = FIXTURES / "corpus" / "034-v010-docker-ts-wrapped-stats-kv-99pct.log"
# Year-less timestamps: --year decides every record's time.
YEARLESS = FIXTURES / "corpus" / "016-v054-idle-stats-llama31.log"
BENCH = FIXTURES / "bench" / "vllm_bench_0_10_detailed.json"
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201e2215cb90000000049454e44ae426082"
)
METRICS = "# HELP vllm:num_requests_running Number.\n# TYPE vllm:num_requests_running gauge\n"


def executable() -> str:
    """The `preemptscope` script installed beside the interpreter running the tests."""
    beside = Path(sys.executable).parent / "preemptscope"
    return str(beside) if beside.exists() else shutil.which("preemptscope") or "preemptscope"


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    exe = executable()
    done = subprocess.run(
        [exe, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def one_error(stderr: str) -> str:
    """The whole of stderr is one `preemptscope: error:` line (no traceback, no usage)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preemptscope: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def not_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("not-logs")
    files = {
        "png": root / "shot.png",
        "bench": root / "bench.json",
        "config": root / "config.json",
        "binary": root / "blob.bin",
        "text": root / "notes.txt",
        "prom": root / "metrics-1.prom",
        "bracket": root / "notes.log",
        "big_json": root / "rows.json",
    }
    # A PNG long enough to hold newlines, as a real screenshot does.
    files["png"].write_bytes(PNG + random.Random(1).randbytes(20_000))
    shutil.copy(BENCH, files["bench"])
    files["config"].write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32})
    )
    files["binary"].write_bytes(random.Random(0).randbytes(50_000))
    files["text"].write_text("shopping list\nmilk\neggs\n")
    files["prom"].write_text(METRICS + "vllm:num_requests_running 3\n")
    # Opens with a bracket, holds no JSON: no guess of JSON (issue 23).
    files["bracket"].write_text("[2026-01-01 10:00:00] deploy started\n" + "step done\n" * 40)
    # JSON bigger than the sniffed head: still told to be JSON.
    files["big_json"].write_text(json.dumps([{"id": i, "text": "x" * 50} for i in range(3000)]))
    return files


@pytest.mark.parametrize("command", ["report", "parse"])
@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("png", "not a vLLM log: binary (PNG image)"),
        ("binary", "not a vLLM log: binary"),
        ("bench", "JSON: did you mean"),
        ("config", "model config.json"),
        ("text", "no vLLM line among 3 lines"),
        ("prom", "a /metrics snapshot"),
        ("bracket", "not a vLLM log: no vLLM line among 41 lines"),
        ("big_json", "JSON: did you mean"),
    ],
)
def test_a_file_that_is_not_a_vllm_log_is_refused(
    not_logs: dict[str, Path], command: str, kind: str, says: str
) -> None:
    code, out, err = run(command, str(not_logs[kind]))
    line = one_error(err)
    assert code == 2 and out == ""
    assert f"{not_logs[kind]}: " in line and says in line
    if kind == "bracket":
        assert "JSON" not in line
    if kind == "bench":
        assert ("--bench FILE" if command == "report" else "report --bench") in line


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("# HELP python_gc_objects_collected_total x\n# TYPE python_gc_objects_collected_total "
         "counter\npython_gc_objects_collected_total{generation=\"0\"} 3.0\n",
         "1 sample(s) of other exporters only"),
        (METRICS, "HELP/TYPE lines only"),
    ],
)  # fmt: skip
def test_a_metrics_file_without_a_vllm_sample_says_so(tmp_path: Path, text: str, says: str) -> None:
    """Not "only 1 scrape(s); at least 3 are needed": there is no vLLM data at all (issue 23)."""
    path = tmp_path / "metrics-1.prom"
    path.write_text(text)
    code, out, err = run("report", "--metrics", str(path))
    line = one_error(err)
    assert code == 2 and out == ""
    assert f"{path}: no vLLM sample in this file: {says}" in line and "at least" not in line


def test_several_non_logs_are_counted_in_the_one_line(not_logs: dict[str, Path]) -> None:
    code, _, err = run("report", str(not_logs["png"]), str(not_logs["binary"]))
    assert code == 2 and "(1 more input without a vLLM line)" in one_error(err)


def test_with_one_real_log_the_report_runs_and_names_the_others(not_logs: dict[str, Path]) -> None:
    code, out, err = run("report", "--json", str(LOG), str(not_logs["png"]))
    assert code == 0
    report = json.loads(out)
    assert [d["name"] for d in report["deployments"]] == [LOG.stem]  # the PNG is no deployment
    (skipped,) = [s for s in report["sources"] if s["path"] == str(not_logs["png"])]
    assert skipped["notes"] == ["not a vLLM log: binary (PNG image); left out of the analysis"]
    assert f"warning: {not_logs['png']}: not a vLLM log" in err
    code, out, _ = run("report", str(LOG), str(not_logs["png"]))
    assert code == 0 and f"note ({not_logs['png']}): not a vLLM log: binary" in out


def test_with_one_real_log_parse_summarises_all_and_names_the_others(
    not_logs: dict[str, Path],
) -> None:
    code, out, err = run("parse", "--json", str(not_logs["bench"]), str(LOG))
    assert code == 0
    assert [json.loads(line)["path"] for line in out.splitlines()] == [
        str(not_logs["bench"]),
        str(LOG),
    ]
    assert f"note ({not_logs['bench']}): not a vLLM log: JSON" in err


def test_bench_results_with_a_misplaced_json_still_report(not_logs: dict[str, Path]) -> None:
    """Given data elsewhere (--bench), a non-log in the log position is a note, not an error."""
    code, out, err = run("report", "--json", str(not_logs["config"]), "--bench", str(BENCH))
    assert code == 0, err
    notes = [n for s in json.loads(out)["sources"] for n in s["notes"]]
    assert any(n.startswith("not a vLLM log: JSON, a model config.json?") for n in notes)


def test_a_directory_of_metrics_snapshots_says_to_pass_metrics(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"metrics-{i}.prom").write_text(METRICS + f"vllm:num_requests_running {i}\n")
    for command in ("report", "parse"):
        code, _, err = run(command, str(tmp_path))
        line = one_error(err)
        assert code == 2
        assert "holds 3 /metrics snapshots (.prom) and no log" in line
        assert f"pass it as --metrics {tmp_path}" in line
    code, _, err = run("report", "--json", "--metrics", str(tmp_path))
    assert code == 0, err


@pytest.mark.parametrize("year", ["0", "-1", "20260", "1969"])
@pytest.mark.parametrize("command", ["report", "parse"])
def test_a_year_out_of_range_is_one_line(command: str, year: str) -> None:
    code, out, err = run(command, str(YEARLESS), f"--year={year}")
    assert code == 2 and out == ""
    assert f"--year {year}: expected a year from 1970 to 2100" in one_error(err)


def test_a_sane_year_still_dates_the_records() -> None:
    code, out, _ = run("parse", "--json", str(YEARLESS), "--year", "2031")
    assert code == 0 and json.loads(out)["first_timestamp"].startswith("2031-08-22")


def test_a_start_out_of_range_is_one_line() -> None:
    code, _, err = run("parse", str(YEARLESS), "--start", "0001-01-01T00:00:00")
    assert code == 2 and "expected a year from 1970 to 2100" in one_error(err)


@pytest.mark.parametrize("flag", ["--start", "--now", "--bench-start"])
def test_a_report_time_out_of_range_is_one_line(flag: str) -> None:
    code, _, err = run("report", str(YEARLESS), "--bench", str(BENCH), flag, "0001-01-01T00:00:00")
    assert code == 2 and "expected a year from 1970 to 2100" in one_error(err)


def test_parse_out_onto_a_file_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "frames"
    target.write_text("keep me")
    code, _, err = run("parse", str(LOG), "--out", str(target))
    assert code == 2 and "exists and is not a directory" in one_error(err)
    assert target.read_text() == "keep me"


def test_parse_out_onto_an_unwritable_path_is_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    code, _, err = run("parse", str(LOG), "--out", str(blocked / "below"))
    assert code == 2 and f"--out {blocked / 'below'}: cannot create it" in one_error(err)
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        code, _, err = run("parse", str(LOG), "--out", str(locked))
        assert code == 2 and "not writable" in one_error(err)


def test_parse_out_keeps_no_frames_of_a_non_log(not_logs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "frames"
    code, _, _ = run("parse", str(not_logs["text"]), str(LOG), "--out", str(out))
    assert code == 0
    written = [p.name for p in out.rglob("*.parquet")]
    assert written and not [name for name in written if name.startswith("notes.txt")]


def test_demo_serve_checks_the_port_before_the_demo(tmp_path: Path) -> None:
    for flags, env in ((["--port", "99999"], {}), ([], {"PREEMPTSCOPE_PORT": "abc"})):
        code, out, err = run("demo", "--serve", "--out", str(tmp_path / "demo"), *flags, env=env)
        assert code == 2 and out == ""
        assert "PORT" in one_error(err).upper()
        assert not (tmp_path / "demo").exists()  # nothing simulated, nothing written


def test_demo_prints_its_report_command_on_one_pasteable_line(tmp_path: Path) -> None:
    out_dir = tmp_path / "demo out"  # a space: the line must quote it
    code, out, err = run("demo", "--out", str(out_dir), "--duration", "3m", cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    command = lines[lines.index("Re-run the analysis yourself:") + 1]
    assert len(command) > 80 and command.startswith("preemptscope report ")
    # Pasting it runs: the same report, exit 0.
    path = f"{Path(executable()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        command + " --json",
        shell=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
    )
    assert done.returncode == 0, done.stderr
    assert {d["name"] for d in json.loads(done.stdout)["deployments"]} == {"chat-a10g", "chat-a100"}


def test_the_parse_table_never_folds_a_path_into_a_column_of_letters(tmp_path: Path) -> None:
    long_name = "a-rather-long-deployment-name-" * 2 + "vllm.log"
    shutil.copy(LOG, tmp_path / long_name)
    shutil.copy(LOG, tmp_path / "vllm.log")
    # In a pipe: as wide as the table needs, so each input is one line to grep.
    code, out, _ = run("parse", "--quiet", long_name, "vllm.log", cwd=tmp_path)
    assert code == 0
    assert [line for line in out.splitlines() if long_name in line and "no count" in line]
    # On an 80-column terminal: paths on their own lines, figures below them.
    script = shutil.which("script")
    if script is None:
        pytest.skip("util-linux `script` is needed for a terminal")
    inner = f"stty cols 80; {executable()} parse --quiet {long_name} vllm.log"
    done = subprocess.run(
        [script, "-qc", inner, "/dev/null"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    )
    lines = [_plain(line) for line in done.stdout.replace("\r", "").splitlines()]
    assert lines and all(len(line) <= 80 for line in lines)
    assert long_name in lines and "vllm.log" in lines
    assert any("P total no count" in line for line in lines)
    assert not [line for line in lines if len(line.strip(" │┃")) == 1]


def _plain(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
