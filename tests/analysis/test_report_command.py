"""`preemptscope report` end to end: real parsers, real files, the JSON contract, exit codes."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from preemptscope.cli import main
from preemptscope.commands.report import parse_duration
from preemptscope.inputs import load_inputs, split_spec, stem

from .test_evidence_properties import check_quotes

CORPUS = Path(__file__).parent.parent / "fixtures" / "analysis" / "corpus"
KV99 = str(CORPUS / "034-v010-docker-ts-wrapped-stats-kv-99pct.log")
PENDING115 = str(CORPUS / "052-v030-stats-with-extra-iteration-time-fields-finished-request.log")
IDLE_V054 = str(CORPUS / "016-v054-idle-stats-llama31.log")
IDLE_NEURON = str(CORPUS / "018-v05x-neuron-inf2-idle-stats.log")
V0_SWAP = str(CORPUS / "008-v050-tqdm-prefixed-stats-swap-preempt.log")
T0 = datetime(2026, 11, 20, 10, 0, 0, tzinfo=UTC)


def report_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["report", "--json", *args]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_kv_full_with_waiting_growing_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    data = report_json(capsys, KV99)
    (dep,) = data["deployments"]
    assert dep["verdict"]["state"] in ("at_risk", "over_capacity")
    assert dep["windows"][0]["over_capacity"]
    assert dep["windows"][0]["kv_usage_max"] == pytest.approx(0.992)
    assert dep["windows"][0]["waiting_max"] == 40
    # a V1 log with no count: inferred, never a number
    assert dep["preemptions"]["total"] is None
    assert dep["windows"][0]["preemptions"] is None
    assert dep["windows"][0]["preemption_quality"] == "inferred"


def test_pending_queue_at_full_kv_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    (dep,) = report_json(capsys, PENDING115)["deployments"]
    assert dep["verdict"]["state"] in ("at_risk", "over_capacity")
    assert dep["advice"][0]["action"] == "raise_gpu_memory_utilization"


@pytest.mark.parametrize("log", [IDLE_V054, IDLE_NEURON])
def test_idle_logs_are_ok(capsys: pytest.CaptureFixture[str], log: str) -> None:
    (dep,) = report_json(capsys, log)["deployments"]
    assert dep["verdict"]["state"] == "ok"
    assert dep["advice"] == []
    assert all(w["idle"] for w in dep["windows"] if w["samples"])


def test_v0_warning_counter_is_reported_as_lower_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (dep,) = report_json(capsys, V0_SWAP)["deployments"]
    pre = dep["preemptions"]
    assert pre["evidence"] == "v0_warning_counter"
    assert pre["exact"] is False
    assert pre["since_start"] == 151
    assert pre["warning_lines"] == 1


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    data = report_json(capsys, KV99, IDLE_V054)
    assert data["schema_version"] == 1
    assert {s["path"] for s in data["sources"]} == {KV99, IDLE_V054}
    source = data["sources"][0]
    assert source["kind"] == "log" and source["lines"] == 9
    assert source["unrecognized_lines"] == 0
    assert data["generated_at"] is not None
    assert len(data["deployments"]) == 2
    for dep in data["deployments"]:
        assert set(dep) >= {
            "name", "verdict", "preemptions", "capacity", "advice", "windows", "episodes",
            "correlation",
        }  # fmt: skip
        assert dep["verdict"]["state"] in ("ok", "at_risk", "over_capacity", "insufficient_data")
        for e in dep["verdict"]["evidence"]:
            assert set(e) >= {"code", "message", "value"}  # fields are added, never renamed
        assert set(dep["preemptions"]) >= {"total", "exact", "evidence"}
    json.dumps(data, allow_nan=False)  # strict JSON: no NaN or Infinity anywhere


def test_fail_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--json", KV99]) == 0  # whatever the verdict
    capsys.readouterr()
    state = report_json(capsys, KV99)["deployments"][0]["verdict"]["state"]
    assert main(["report", "--json", "--fail-on", "at_risk", KV99]) == 3
    capsys.readouterr()
    expected = 3 if state == "over_capacity" else 0
    assert main(["report", "--json", "--fail-on", "over_capacity", KV99]) == expected
    capsys.readouterr()
    assert main(["report", "--json", "--fail-on", "at_risk", IDLE_V054]) == 0


def test_rich_summary_has_the_same_facts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", KV99]) == 0
    text = capsys.readouterr().out
    assert "034-v010-docker-ts-wrapped-stats-kv-99pct" in text
    assert "AT RISK" in text or "OVER CAPACITY" in text
    assert "likely" in text
    assert "Advice" in text and "--gpu-memory-utilization" in text


def test_bad_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing.log")]) == 2
    assert "missing.log" in capsys.readouterr().err
    assert main(["report", "--window", "soon", KV99]) == 2
    assert "bad duration" in capsys.readouterr().err
    assert main(["report"]) == 2
    assert "nothing to analyze" in capsys.readouterr().err


def test_helpers() -> None:
    assert parse_duration("60s") == 60 and parse_duration("5m") == 300
    assert parse_duration("1h") == 3600 and parse_duration("500ms") == 0.5
    assert parse_duration("90") == 90
    assert split_spec("a.log=prod") == ("a.log", "prod")
    assert split_spec("http://h:8000/metrics?x=1") == ("http://h:8000/metrics?x=1", None)
    assert split_spec("http://h:8000/metrics?x=1=prod") == ("http://h:8000/metrics?x=1", "prod")
    assert split_spec("http://h:8000/metrics=prod") == ("http://h:8000/metrics", "prod")
    assert stem("/x/vllm-prod.log.gz") == "vllm-prod"
    assert stem("/x/vllm.log.1") == "vllm" and stem("/x/vllm.log.2.gz") == "vllm"
    assert stem("http://10.0.0.1:8000/metrics") == "10.0.0.1_8000"


# -------------------------------------------------------------------------------------------
# One deployment from a log, a directory of /metrics snapshots and client rows, joined on time


def _stats_line(t: datetime, running: int, waiting: int, kv: float) -> str:
    return (
        f"INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: 900.0 "
        f"tokens/s, Avg generation throughput: 1200.0 tokens/s, Running: {running} reqs, "
        f"Waiting: {waiting} reqs, GPU KV cache usage: {kv * 100:.1f}%, Prefix cache hit rate: "
        "10.0%"
    )


def _write_deployment(tmp: Path) -> tuple[Path, Path, Path]:
    """10 minutes: quiet for 5, then preempting for 5 (KV full, queue, slow requests)."""
    log = tmp / "prod.log"
    lines = [
        "INFO 11-20 09:59:50 [api_server.py:1] vLLM API server version 0.10.1",
        "INFO 11-20 09:59:55 [kv_cache_utils.py:716] GPU KV cache size: 120,000 tokens",
        "INFO 11-20 09:59:55 [kv_cache_utils.py:720] Maximum concurrency for 8,192 tokens "
        "per request: 14.65x",
    ]
    snapshots = tmp / "metrics"
    snapshots.mkdir()
    rows = []
    preempted = 0
    for i in range(60):
        t = T0 + timedelta(seconds=10 * i)
        hot = i >= 30
        lines.append(_stats_line(t, 60 - (i % 3) if hot else 30, 25 if hot else 0,
                                 0.99 if hot else 0.55))  # fmt: skip
        if i % 3 == 0:
            preempted += 12 if hot else 0
            scrape = t + timedelta(seconds=5)  # off the window edge
            (snapshots / f"{scrape:%Y%m%dT%H%M%SZ}.prom").write_text(
                "# TYPE vllm:num_preemptions_total counter\n"
                f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempted}\n'
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {0.99 if hot else 0.55}\n'
            )
        for k in range(4):
            slow = hot and k == 0
            rows.append(
                {
                    "start": (t + timedelta(seconds=k)).isoformat(),
                    "e2e": 40.0 if slow else 3.0 + 0.1 * k,
                    "ttft": 0.2,
                    "prompt_tokens": 1000,
                    "output_tokens": 600,
                }
            )
    log.write_text("\n".join(lines) + "\n")
    bench = tmp / "client.jsonl"
    bench.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return log, snapshots, bench


def test_log_metrics_and_bench_join_into_one_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, snapshots, bench = _write_deployment(tmp_path)
    data = report_json(
        capsys, str(log), "--metrics", str(snapshots), "--bench", str(bench), "--year", "2026"
    )
    (dep,) = data["deployments"]
    assert dep["name"] == "prod"
    assert [s["kind"] for s in data["sources"]] == ["log", "metrics", "bench"]
    assert {s["deployment"] for s in data["sources"]} == {"prod"}
    assert dep["verdict"]["state"] == "over_capacity"
    pre = dep["preemptions"]
    assert pre["evidence"] == "metrics_counter" and pre["exact"]
    assert pre["total"] == 12 * 10  # increases seen between scrapes
    assert dep["capacity"]["kv_cache_tokens"] == 120_000
    assert dep["capacity"]["mean_tokens_per_request"] == 1600
    corr = dep["correlation"]
    assert corr["metric"] == "e2e"
    assert corr["p99_over_mean_with"] > 2 * corr["p99_over_mean_without"]
    assert corr["spearman_rho"] > 0.5
    (episode,) = dep["episodes"]
    assert episode["start"].startswith("2026-11-20T10:05")
    advice = {a["action"]: a for a in dep["advice"]}
    assert dep["advice"][0]["action"] == "raise_gpu_memory_utilization"
    # 120,000 KV tokens / 1,600 tokens per request = 75 >= peak running 60: no help there, so
    # the cap comes from where preemption began (60 running)
    assert advice["lower_max_num_seqs"]["suggested"] == "59"
    assert advice["lower_max_num_seqs"]["rank"] == 2


def test_names_group_sources(tmp_path: Path) -> None:
    log, snapshots, bench = _write_deployment(tmp_path)
    other = tmp_path / "other.log"
    other.write_text(log.read_text())
    # One server's rotated log and its /metrics under one name: one deployment.
    rotated = tmp_path / "prod.log.1"
    rotated.write_text(log.read_text())
    grouped = load_inputs([f"{log}=a", f"{rotated}=a"], [f"{snapshots}=a"])
    assert [d.name for d in grouped] == ["a"] and len(grouped[0].logs) == 2
    # Two logs running at the same time under one name are replicas: one deployment each, in
    # group "a"; the /metrics cannot be told to one of them, so they stay the group's own.
    replicas = load_inputs([f"{log}=a", f"{other}=a"], [f"{snapshots}=a"])
    assert [d.name for d in replicas] == ["a/prod", "a/other", "a"]
    assert {d.group for d in replicas} == {"a"} and replicas[2].metrics is not None
    apart = load_inputs([str(log), str(other)], [f"{snapshots}=other"], [f"{bench}=prod"])
    assert sorted(d.name for d in apart) == ["other", "prod"]
    assert apart[0].latencies is not None or apart[1].latencies is not None


def test_unnamed_metrics_with_two_deployments_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, snapshots, _ = _write_deployment(tmp_path)
    other = tmp_path / "other.log"
    other.write_text(log.read_text())
    assert main(["report", str(log), str(other), "--metrics", str(snapshots)]) == 2
    assert "=NAME" in capsys.readouterr().err


def test_metrics_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, snapshots, _ = _write_deployment(tmp_path)
    (dep,) = report_json(capsys, "--metrics", str(snapshots))["deployments"]
    assert dep["name"] == "metrics"
    assert dep["preemptions"]["total"] == 120


def test_window_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, _, _ = _write_deployment(tmp_path)
    one = report_json(capsys, str(log), "--year", "2026")["deployments"][0]
    two = report_json(capsys, str(log), "--year", "2026", "--window", "30s")["deployments"][0]
    assert len(one["windows"]) == 10  # stats from 10:00:00 to 10:09:50
    assert len(two["windows"]) == 20


def test_html_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    code = main(["report", "--json", KV99, "--html", str(out)])
    if importlib.util.find_spec("preemptscope.dashboards.html") is None:
        assert code == 2
        assert "preemptscope.dashboards.html" in capsys.readouterr().err
    else:
        assert code == 0
        assert out.stat().st_size > 0


def test_a_directory_is_one_deployment(tmp_path: Path) -> None:
    log, _, _ = _write_deployment(tmp_path)
    logs = tmp_path / "prod-logs"
    logs.mkdir()
    (logs / "vllm.log.1").write_text(log.read_text())
    (logs / "vllm.log").write_text(log.read_text())
    (grouped,) = load_inputs([str(logs)])
    assert grouped.name == "prod-logs" and len(grouped.logs) == 2
    (named,) = load_inputs([f"{logs}=prod"])
    assert named.name == "prod"


def test_metrics_url_is_scraped_over_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = (
        b"# TYPE vllm:num_preemptions_total counter\n"
        b'vllm:num_preemptions_total{engine="0",model_name="m"} 42\n'
        b"# TYPE vllm:kv_cache_usage_perc gauge\n"
        b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97\n'
        b"# TYPE vllm:num_requests_running gauge\n"
        b'vllm:num_requests_running{engine="0",model_name="m"} 12\n'
    )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        data = report_json(capsys, "--metrics", f"{url}=live")
    finally:
        server.shutdown()
        server.server_close()
    (dep,) = data["deployments"]
    assert dep["name"] == "live"
    assert data["sources"][0]["path"] == url
    # one scrape: the lifetime counter is history, not a count for any window
    assert dep["preemptions"]["since_start"] == 42
    assert dep["preemptions"]["total"] is None
    assert dep["windows"][0]["kv_usage_max"] == pytest.approx(0.97)
    # one scrape cannot tell what happens now; the lifetime counter is reported as such
    assert dep["verdict"]["state"] == "insufficient_data"
    codes = [e["code"] for e in dep["verdict"]["evidence"]]
    assert codes[0] == "samples" and "counter_since_start" in codes


BENCH = Path(__file__).parent.parent / "fixtures" / "bench"
ROUND2 = Path(__file__).parent.parent / "fixtures" / "round2"


@pytest.mark.parametrize(
    "summary", ["vllm_bench_summary_only.json", "trtllm_benchmark_serving_summary.json"]
)
def test_a_summary_only_client_result_does_not_abort_the_report(
    summary: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = report_json(capsys, KV99, "--bench", str(BENCH / summary))
    (dep,) = data["deployments"]
    assert dep["windows"], "the log analysis is kept"
    (run,) = dep["client_runs"]
    assert run["requests"] in (11, 198) and run["latency"]["e2e"]["source"] == "run"
    evidence = {e["code"]: e for e in dep["verdict"]["evidence"]}
    assert "client_run" in evidence
    check_quotes(dep)  # the run's sentence quotes client_runs.0.* as the JSON holds them
    if run["start"] is None:
        assert "not placed in time" in evidence["client_run"]["message"]
    bench = next(s for s in data["sources"] if s["kind"] == "bench")
    assert bench["records"] == {"requests": 0, "runs": 1}
    # the run's own totals give the demand when no request row does
    expected = (202752 + 50688) / 198 if run["requests"] == 198 else (5632 + 704) / 11
    assert dep["capacity"]["mean_tokens_per_request"] == pytest.approx(expected)


def test_a_client_file_without_any_latency_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = tmp_path / "header.csv"
    header.write_text("start,e2e\n")
    assert main(["report", KV99, "--bench", str(header)]) == 2
    assert "no per-request latencies and no whole-run figures" in capsys.readouterr().err


def test_round2_guidellm_run_is_placed_on_the_time_axis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (guidellm,) = ROUND2.glob("b03-*.json")
    data = report_json(capsys, "--bench", str(guidellm))
    (dep,) = data["deployments"]
    runs = dep["client_runs"]
    assert runs and all(r["start"] is not None for r in runs)
    assert sum(w["latency"].get("e2e", {}).get("count", 0) for w in dep["windows"]) == 23


@pytest.mark.parametrize("name", ["104", "108", "110", "124"])
def test_round2_v1_logs_have_no_count_and_no_zero(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (log,) = ROUND2.glob(f"{name}-*.log")
    (dep,) = report_json(capsys, str(log))["deployments"]
    assert dep["preemptions"]["total"] is None
    assert all(w["preemptions"] is None for w in dep["windows"])
    assert dep["verdict"]["state"] in ("ok", "insufficient_data")  # nothing alarming there
    (said,) = [e for e in dep["verdict"]["evidence"] if e["code"] == "preemptions"]
    assert "no preemption count" in said["message"] and " 0 " not in said["message"]
    check_quotes(dep)


def test_round2_glued_v0_warning_counts_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    (log,) = ROUND2.glob("116-*.log")
    (dep,) = report_json(capsys, str(log))["deployments"]
    pre = dep["preemptions"]
    assert pre["warning_lines"] == 1 and pre["since_start"] == 51 and pre["total"] == 1
    assert dep["verdict"]["state"] == "at_risk"  # one moment, not a sustained episode
    codes = {e["code"]: e["message"] for e in dep["verdict"]["evidence"]}
    assert "51" in codes["counter_since_start"]
    assert "one record" in codes["episodes"]
    check_quotes(dep)
