"""`preemptscope capacity` cross-checked against real vLLM startup lines (shared corpus)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preemptscope.cli import main

MODELS = Path(__file__).parent.parent / "fixtures" / "models"
LLAMA3_8B = str(MODELS / "llama-3-8b" / "config.json")
QWEN3_1_7B = str(MODELS / "qwen3-1.7b" / "config.json")


def capacity_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["capacity", "--json", *args]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize(
    ("peak_torch", "kv_gib", "blocks", "context", "concurrency"),
    [
        # corpus 020 (v0.6.4, 8B Llama on a 23.58 GiB GPU), two runs:
        # "Loading model weights took 14.9888 GB", "Memory profiling results:
        # total_gpu_memory=23.58GiB ... peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB
        # kv_cache_size=3.81GiB gpu_memory_utilization=0.90", "GPU blocks: 1952",
        # "Maximum concurrency for 20000 tokens per request: 1.56x"
        (17.06, 3.81, 1952, 20000, 1.56),
        # ... peak_torch_memory=17.98GiB ... kv_cache_size=2.89GiB, "# GPU blocks: 1478",
        # "Maximum concurrency for 29000 tokens per request: 0.82x"
        (17.98, 2.89, 1478, 29000, 0.82),
    ],
)
def test_llama3_8b_matches_v064_memory_profile(
    capsys: pytest.CaptureFixture[str],
    peak_torch: float,
    kv_gib: float,
    blocks: int,
    context: int,
    concurrency: float,
) -> None:
    weights = 14.9888
    out = capacity_json(
        capsys,
        "--config", LLAMA3_8B,
        "--gpu-memory-gib", "23.58",
        "--gpu-memory-utilization", "0.90",
        "--weights-gib", str(weights),
        "--activation-gib", f"{peak_torch - weights:.4f}",
        "--non-torch-gib", "0.35",
        "--context-len", str(context),
    )  # fmt: skip
    assert out["bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert out["kv_memory_gib"] == pytest.approx(kv_gib, abs=0.01)
    # the logged inputs are rounded to 0.01 GiB: allow one block per 0.01 GiB of rounding
    assert abs(out["num_gpu_blocks"] - blocks) <= 2
    assert round(out["max_concurrency"], 2) == pytest.approx(concurrency, abs=0.01)


def test_qwen3_14b_matches_v011_kv_lines(capsys: pytest.CaptureFixture[str]) -> None:
    # reference log (v0.10.2/0.11.0): "Available KV cache memory: 6.51 GiB",
    # "GPU KV cache size: 42,656 tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x"
    out = capacity_json(
        capsys, "--model", "qwen3-14b", "--kv-memory-gib", "6.51", "--context-len", "32768"
    )
    assert out["kv_cache_tokens"] == 42_656
    assert round(out["max_concurrency"], 2) == 1.30
    assert out["kv_cache_tokens"] / 32_768 == pytest.approx(out["max_concurrency"])


def test_qwen3_1_7b_matches_v091_kv_lines(capsys: pytest.CaptureFixture[str]) -> None:
    # corpus 066 (v0.9.1): "Available KV cache memory: 26.91 GiB", "GPU KV cache size: 251,920
    # tokens", "Maximum concurrency for 40,960 tokens per request: 6.15x", num_gpu_blocks 15745
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--kv-memory-gib", "26.91")
    assert out["context_len"] == 40_960  # the config's max_position_embeddings
    assert abs(out["num_gpu_blocks"] - 15_745) <= 1  # 26.91 is rounded to 0.01 GiB
    assert round(out["max_concurrency"], 2) == 6.15


def test_text_output_and_needed_utilization(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["capacity", "--config", LLAMA3_8B, "--gpu", "H100", "--context-len", "8192"]
    assert main([*args, "--concurrency", "32"]) == 0
    text = capsys.readouterr().out
    assert "GPU KV cache size" in text and "Maximum concurrency" in text
    assert "--gpu-memory-utilization" in text
    out = capacity_json(capsys, *args[1:], "--concurrency", "32")
    assert 0 < out["needed_gpu_memory_utilization"] <= 1
    # the utilization it asks for really gives room for 32 requests
    again = capacity_json(
        capsys, *args[1:], "--gpu-memory-utilization", str(out["needed_gpu_memory_utilization"])
    )
    assert again["kv_cache_tokens"] >= 32 * 8192


def test_tensor_parallel_gives_more_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--config", LLAMA3_8B, "--gpu", "L4", "--context-len", "8192"]
    one = capacity_json(capsys, *base)
    two = capacity_json(capsys, *base, "--tp", "2")
    assert two["kv_cache_tokens"] > 2 * one["kv_cache_tokens"]


def test_bad_config_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096,\n "oops"\n}')
    assert main(["capacity", "--config", str(bad), "--gpu", "H100"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not JSON" in err
    bad.write_text('{"hidden_size": 4096}')
    assert main(["capacity", "--config", str(bad), "--gpu", "H100"]) == 2
    assert "num_hidden_layers" in capsys.readouterr().err
    missing = tmp_path / "nope.json"
    assert main(["capacity", "--config", str(missing), "--gpu", "H100"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_gpu_memory_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "--config", LLAMA3_8B]) == 2
    assert "--gpu-memory-gib" in capsys.readouterr().err


CORPUS = Path(__file__).parent.parent / "fixtures" / "analysis" / "corpus"


def _logged(path: Path) -> list[dict[str, object]]:
    from preemptscope.ingest.logs import parse_path

    frame = parse_path(str(path))["kv_capacity"]
    return list(frame.select("kind", "value", "context_tokens").iter_rows(named=True))


def test_capacity_agrees_with_the_parsed_startup_lines(capsys: pytest.CaptureFixture[str]) -> None:
    # Read the real log with the real parser, feed its memory figures to the calculator.
    rows = _logged(CORPUS / "020-v064-bare-startup-gpu-blocks-no-prefix.log")
    first = {r["kind"]: r for r in rows[: len(rows) // 2]}
    out = capacity_json(
        capsys,
        "--config", LLAMA3_8B,
        "--kv-memory-gib", str(first["memory_for_kv"]["value"]),
        "--context-len", str(first["max_concurrency"]["context_tokens"]),
    )  # fmt: skip
    assert abs(out["num_gpu_blocks"] - float(str(first["gpu_blocks"]["value"]))) <= 2
    assert round(out["max_concurrency"], 2) == first["max_concurrency"]["value"]

    by_kind = {
        r["kind"]: r
        for r in _logged(CORPUS / "066-v091-v1-startup-kv-size-engine000-cache-config-info.log")
    }
    out = capacity_json(
        capsys,
        "--config", QWEN3_1_7B,
        "--kv-memory-gib", str(by_kind["available_kv_memory"]["value"]),
        "--context-len", str(by_kind["max_concurrency"]["context_tokens"]),
    )  # fmt: skip
    logged_tokens = float(str(by_kind["kv_cache_tokens"]["value"]))
    assert abs(out["kv_cache_tokens"] - logged_tokens) <= 16  # one block
    assert round(out["max_concurrency"], 2) == by_kind["max_concurrency"]["value"]
    # and vLLM's own formula on the logged line: tokens / context = concurrency
    context = float(str(by_kind["max_concurrency"]["context_tokens"]))
    assert round(logged_tokens / context, 2) == by_kind["max_concurrency"]["value"]


def test_log_option_compares_with_the_logged_lines(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(CORPUS / "066-v091-v1-startup-kv-size-engine000-cache-config-info.log")
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", log)
    assert out["logged"]["kv_cache_tokens"] == 251_920
    assert out["context_len"] == 40_960  # taken from the logged concurrency line
    assert abs(out["num_gpu_blocks"] - out["logged"]["num_gpu_blocks"]) <= 1
    assert main(["capacity", "--config", QWEN3_1_7B, "--log", log]) == 0
    text = capsys.readouterr().out
    assert "logged by vLLM" in text and "251,920 tokens (computed 251,936 tokens)" in text
    idle = str(CORPUS / "016-v054-idle-stats-llama31.log")
    assert main(["capacity", "--config", QWEN3_1_7B, "--log", idle]) == 2
    assert "no KV-sizing lines" in capsys.readouterr().err


ROUND2 = Path(__file__).parent.parent / "fixtures" / "round2"


def _round2(prefix: str) -> str:
    (path,) = ROUND2.glob(f"{prefix}-*.log")
    return str(path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--context-len", "0"], "--context-len must be >= 1, got 0"),
        (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
        (["--gpu-memory-gib", "-3"], "--gpu-memory-gib must be > 0, got -3"),
        (["--gpu-memory-gib", "nan"], "--gpu-memory-gib must be > 0, got nan"),
        (["--kv-memory-gib", "0"], "--kv-memory-gib must be > 0, got 0"),
        (
            ["--gpu", "L4", "--gpu-memory-utilization", "0"],
            "--gpu-memory-utilization must be in (0, 1], got 0",
        ),
        (["--gpu", "L4", "--tp", "0"], "--tp must be >= 1, got 0"),
        (["--gpu", "L4", "--block-size", "-16"], "--block-size must be >= 1, got -16"),
        (["--gpu", "L4", "--weights-gib", "-1"], "--weights-gib must be >= 0, got -1"),
    ],
)
def test_meaningless_values_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["capacity", "--config", QWEN3_1_7B, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [f"preemptscope: error: {message}"]


def test_meaningless_value_in_a_real_process() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "preemptscope", "capacity", "--config", QWEN3_1_7B,
         "--gpu-memory-gib", "-3"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "preemptscope: error: --gpu-memory-gib must be > 0, got -3"
    ]
    assert "Traceback" not in done.stderr and "try increasing" not in done.stderr.lower()


def test_binary_config_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "config.json"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert main(["capacity", "--config", str(png), "--gpu", "H100"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"preemptscope: error: {png}: binary data, not a Hugging Face config.json"
    ]
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"model_type": "caf\xe9"}'.encode("latin-1"))
    assert main(["capacity", "--config", str(latin), "--gpu", "H100"]) == 2
    assert "not UTF-8 text (byte 19)" in capsys.readouterr().err


def test_model_is_named_from_the_config_not_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.loads(Path(QWEN3_1_7B).read_text())
    folder = tmp_path / "snapshots" / "abc123"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    out = capacity_json(capsys, "--config", str(folder / "config.json"), "--gpu", "L4")
    assert out["model"] == "Qwen3ForCausalLM"  # architectures: the config has no hub name
    config["_name_or_path"] = "Qwen/Qwen3-1.7B"
    (folder / "config.json").write_text(json.dumps(config))
    # a model directory works too, as downloaded from the Hub
    out = capacity_json(capsys, "--config", str(folder), "--gpu", "L4")
    assert out["model"] == "Qwen/Qwen3-1.7B"
    del config["_name_or_path"], config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    assert capacity_json(capsys, "--config", str(folder), "--gpu", "L4")["model"] == "qwen3"


def test_context_length_is_said_where_it_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--gpu", "L4")
    assert (out["context_source"], out["context_len"]) == ("model", 40_960)
    assert main(["capacity", "--config", QWEN3_1_7B, "--gpu", "L4"]) == 0
    assert "(the model's max_position_embeddings" in capsys.readouterr().out
    # the log's concurrency is for 180,000 tokens per request (round-2 128, elided headers)
    log = _round2("128")
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", log, "--context-len", "8192")
    assert out["context_len"] == 8192 and out["context_source"] == "flag"
    assert out["max_concurrency_at_logged_context"] == pytest.approx(
        out["kv_cache_tokens"] / 180_000
    )
    assert main(["capacity", "--config", QWEN3_1_7B, "--log", log, "--context-len", "8192"]) == 0
    text = capsys.readouterr().out
    assert "1.34x for 180,000 tokens per request (computed 0.21x at that length" in text
    assert "above is for 8,192" in text
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", log)
    assert (out["context_len"], out["context_source"]) == (180_000, "log")
    assert "max_concurrency_at_logged_context" not in out


def test_log_kv_memory_from_kv_cache_memory_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    # round-2 118: `reserved 4.25 GiB memory for KV Cache as specified by kv_cache_memory_bytes`
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", _round2("118"))
    assert out["gpu"] == "given KV memory" and out["kv_memory_gib"] == 4.25
    assert out["logged"]["kv_memory_gib"] == 4.25


def test_log_free_memory_line_feeds_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        "(EngineCore pid=1) INFO 05-01 10:00:00 [gpu_worker.py:440] Free memory on device "
        "(46.99/47.37 GiB) on startup. Desired GPU memory utilization is (0.85, 40.27 GiB). "
        "Actual usage is 3.2 GiB for weight, 0.2 GiB for peak activation. Current kv cache "
        "memory in use is 36.88 GiB.\n"
    )
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", str(log))
    assert out["kv_memory_gib"] == 36.88 and out["logged"]["gpu_memory_gib"] == 47.37
    # without the KV figure, the logged GPU size and utilization are the GPU flags
    log.write_text(  # V0's memory profile (v0.6.5 - v0.10.2), no KV figure on this line
        "(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] the current vLLM "
        "instance can use total_gpu_memory (31.86GiB) x gpu_memory_utilization (0.97) = "
        "30.90GiB\n"
        "(APIServer pid=1) INFO 05-01 10:00:00 [model.py:1554] Using max model len 4096\n"
    )
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", str(log))
    assert (out["gpu_memory_gib"], out["gpu_memory_utilization"]) == (31.86, 0.97)
    assert (out["context_len"], out["context_source"]) == (4096, "log")


def test_log_serving_settings_are_used_unless_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=1) INFO 05-01 10:00:00 [utils.py:233] non-default args: {'model': "
        "'Qwen/Qwen3-1.7B', 'tensor_parallel_size': 2, 'block_size': 32, 'kv_cache_dtype': "
        "'fp8'}\n"
        "(Worker_TP0 pid=2) INFO 05-01 10:00:30 [gpu_worker.py:298] Available KV cache memory: "
        "6.51 GiB\n"
        "(EngineCore_DP0 pid=3) INFO 05-01 10:00:31 [kv_cache_utils.py:868] Maximum concurrency "
        "for 32,768 tokens per request: 1.30x\n"
    )
    out = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", str(log))
    assert out["settings_from_log"] == {"tp": 2, "block_size": 32, "kv_cache_dtype": "fp8"}
    assert (out["tensor_parallel_size"], out["block_size"]) == (2, 32)
    assert out["bytes_per_token"] == 28 * 2 * (8 // 2) * 128 * 1  # fp8, half the KV heads
    flagged = capacity_json(capsys, "--config", QWEN3_1_7B, "--log", str(log), "--tp", "1")
    assert flagged["tensor_parallel_size"] == 1 and "tp" not in flagged["settings_from_log"]
