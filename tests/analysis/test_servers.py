"""Several servers under one name: told apart, analysed each, summarised, never summed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from preemptscope.cli import main
from preemptscope.inputs import load_inputs

START = datetime(2026, 3, 14, 9, 0)


def server_log(blocks: int, running: int, kv: float, *, pid: int, minutes: int = 10,
               begin: datetime = START) -> str:  # fmt: skip
    """A V0 server: its startup (KV size) then stats every 10 s."""
    stamp = begin - timedelta(seconds=30)
    lines = [
        f"INFO {stamp:%m-%d %H:%M:%S} llm_engine.py:237] Initializing an LLM engine (v0.6.3) "
        "with config: model='m', tokenizer='m', max_seq_len=8192",
        f"INFO {stamp:%m-%d %H:%M:%S} gpu_executor.py:122] # GPU blocks: {blocks}, "
        "# CPU blocks: 2048",
    ]
    for i in range(minutes * 6):
        t = begin + timedelta(seconds=10 * i)
        lines.append(
            f"INFO {t:%m-%d %H:%M:%S} metrics.py:351] Avg prompt throughput: 100.0 tokens/s, "
            f"Avg generation throughput: 300.0 tokens/s, Running: {running} reqs, Swapped: 0 "
            f"reqs, Pending: {3 if kv > 0.98 else 0} reqs, GPU KV cache usage: {kv * 100:.1f}%, "
            "CPU KV cache usage: 0.0%."
        )
    return "\n".join(lines) + "\n"


def report(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["report", "--json", "--year", "2026", *args]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_a_directory_of_two_servers_is_two_deployments_and_a_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "gpu-a.log").write_text(server_log(1660, 23, 0.99, pid=11))
    (logs / "gpu-b.log").write_text(server_log(9678, 11, 0.30, pid=12))
    data = report(capsys, str(logs))
    deployments = {d["name"]: d for d in data["deployments"]}
    assert set(deployments) == {"logs/gpu-a", "logs/gpu-b"}
    a, b = deployments["logs/gpu-a"], deployments["logs/gpu-b"]
    assert a["capacity"]["num_gpu_blocks"] == 1660 and b["capacity"]["num_gpu_blocks"] == 9678
    assert a["capacity"]["peak_running"] == 23 and b["capacity"]["peak_running"] == 11
    assert max(w["running_max"] or 0 for w in a["windows"]) == 23  # never 23 + 11
    assert a["verdict"]["state"] == "over_capacity" and b["verdict"]["state"] == "ok"
    assert a["group"] == b["group"] == "logs"
    (group,) = data["groups"]
    assert group["members"] == ["logs/gpu-a", "logs/gpu-b"]
    assert group["state"] == "over_capacity" and group["servers_over_capacity"] == 1
    assert group["peak_running"] == {"logs/gpu-a": 23, "logs/gpu-b": 11}
    assert "not added" in group["message"]
    assert {s["deployment"] for s in data["sources"]} == {"logs/gpu-a", "logs/gpu-b"}


def test_replicas_joined_by_name_are_reported_per_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = tmp_path / "replica-1.log", tmp_path / "replica-2.log"
    one.write_text(server_log(1660, 20, 0.99, pid=1))
    two.write_text(server_log(1660, 20, 0.99, pid=1))  # same KV size, same time: 2 servers
    data = report(capsys, f"{one}=web", f"{two}=web")
    assert [d["name"] for d in data["deployments"]] == ["web/replica-1", "web/replica-2"]
    (group,) = data["groups"]
    assert group["state"] == "over_capacity" and group["servers_over_capacity"] == 2
    assert group["preemptions_total"] is not None


def test_rotated_files_of_one_server_stay_one(tmp_path: Path) -> None:
    logs = tmp_path / "rotated"
    logs.mkdir()
    (logs / "vllm.log.1").write_text(server_log(1660, 20, 0.5, pid=7))
    later = START + timedelta(minutes=10)
    (logs / "vllm.log").write_text(server_log(1660, 20, 0.5, pid=7, begin=later))
    (deployment,) = load_inputs([str(logs)])
    assert deployment.name == "rotated" and len(deployment.logs) == 2 and deployment.group is None


def test_a_restart_with_another_kv_size_in_sequence_is_one_server(tmp_path: Path) -> None:
    """Sequential files (no overlap) of the same file family: a restart, not a second server."""
    logs = tmp_path / "restart"
    logs.mkdir()
    (logs / "vllm.log.1").write_text(server_log(1660, 20, 0.5, pid=7))
    later = START + timedelta(minutes=30)
    (logs / "vllm.log").write_text(server_log(2400, 20, 0.5, pid=8, begin=later))
    assert len(load_inputs([str(logs)])) == 1


def test_metrics_for_a_name_with_several_servers_stay_with_the_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "pair"
    logs.mkdir()
    (logs / "a.log").write_text(server_log(1660, 23, 0.99, pid=11))
    (logs / "b.log").write_text(server_log(9678, 11, 0.30, pid=12))
    snap = tmp_path / "snap.prom"
    snap.write_text('vllm:num_requests_running{model_name="m"} 4\n')
    inputs = load_inputs([str(logs)], [f"{snap}=pair"])
    assert [i.name for i in inputs] == ["pair/a", "pair/b", "pair"]
    assert inputs[-1].metrics is not None and not inputs[-1].logs


def test_two_servers_writing_to_one_file_are_told_apart_by_pid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One file, two V1 servers at once (their API servers' pids): never 23 + 11 running."""
    lines = []
    for core, tokens in ((201, 26560), (202, 154880)):
        lines.append(
            f"(EngineCore_DP0 pid={core}) INFO 03-14 08:59:30 [kv_cache_utils.py:1087] "
            f"GPU KV cache size: {tokens:,} tokens"
        )
    for i in range(60):
        t = START + timedelta(seconds=10 * i)
        for pid, running, kv in ((101, 23, 99.5), (102, 11, 20.0)):
            waiting = 6 if kv > 98 else 0
            lines.append(
                f"(APIServer pid={pid}) INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: "
                f"Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 300.0 "
                f"tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache "
                f"usage: {kv}%, Prefix cache hit rate: 0.0%"
            )
    log = tmp_path / "both.log"
    log.write_text("\n".join(lines) + "\n")
    data = report(capsys, str(log))
    deployments = {d["name"]: d for d in data["deployments"]}
    assert set(deployments) == {"both/both-pid101", "both/both-pid102"}
    first, second = deployments["both/both-pid101"], deployments["both/both-pid102"]
    assert first["capacity"]["peak_running"] == 23 and second["capacity"]["peak_running"] == 11
    # each engine start goes with its own server (startups pair with servers in order)
    assert first["capacity"]["kv_cache_tokens"] == 26560
    assert second["capacity"]["kv_cache_tokens"] == 154880
    assert first["verdict"]["state"] == "over_capacity" and second["verdict"]["state"] == "ok"
    # the file is one source, counted once
    (source,) = [s for s in data["sources"] if s["path"] == str(log)]
    assert source["lines"] == len(lines)
    (group,) = data["groups"]
    assert group["name"] == "both" and group["state"] == "over_capacity"


def test_one_server_with_two_engines_in_one_file_stays_one(tmp_path: Path) -> None:
    """Data parallel: one API server logs Engine 000 and Engine 001; their running adds up."""
    lines = []
    for i in range(30):
        t = START + timedelta(seconds=10 * i)
        for engine in (0, 1):
            lines.append(
                f"(APIServer pid=7) INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 00{engine}: "
                "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 3.0 tokens/s, "
                "Running: 5 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, Prefix cache hit "
                "rate: 0.0%"
            )
    log = tmp_path / "dp.log"
    log.write_text("\n".join(lines) + "\n")
    (deployment,) = load_inputs([str(log)])
    assert deployment.name == "dp" and deployment.group is None
