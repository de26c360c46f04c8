"""Run vLLM's real V1 scheduler (KV manager, block pool, prefix caching) on CPU with a stand-in
executor, and record what a deployment would show: per-request client rows (JSONL), per-step
records, the startup log lines and a /metrics snapshot.

Runs in its own venv (bench/parity/setup.sh): vLLM 0.33.0 with --no-deps and CPU torch. No
model runs: a tiny Llama config.json, no weights. The stand-in executor samples one token for
every request whose scheduled tokens reach the end of its sequence (none for a partial prefill
chunk) and advances a virtual clock by a step cost `a + b x scheduled tokens + c x context`
(a virtual clock instead of sleeping: the shared machine's load cannot spoil a run, and the
cost is deliberately not the simulator's fitted form).

    python harness.py OUT_DIR [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

VERSION = "0.33.0"
T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "vocab_size": 32000,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
# Step cost of the stand-in GPU (seconds): per step, per scheduled token, per context token.
STEP_A, STEP_B, STEP_C = 0.020, 0.00012, 0.0000004


@dataclass(frozen=True)
class Workload:
    name: str
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    shared_prefix: int = 0  # tokens every prompt starts with


@dataclass(frozen=True)
class Setting:
    max_num_seqs: int
    num_blocks: int
    max_num_batched_tokens: int
    block_size: int = 16
    max_model_len: int = 4096


def _lognormal(
    rng: np.random.Generator, mean: float, cv: float, n: int, lo: int, hi: int
) -> npt.NDArray[np.int64]:
    s2 = np.log1p(cv**2)
    v = rng.lognormal(np.log(mean) - s2 / 2, np.sqrt(s2), n)
    return np.clip(np.rint(v), lo, hi).astype(np.int64)


def workloads() -> list[Workload]:
    rng = np.random.default_rng(11)
    out = []
    # Short-prompt bursts: 4 bursts of 40 requests, 25 s apart.
    arr = np.sort(np.concatenate([k * 25.0 + rng.uniform(0, 2.0, 40) for k in range(4)]))
    n = len(arr)
    out.append(Workload("bursts", arr, _lognormal(rng, 200, 0.5, n, 16, 2000),
                        _lognormal(rng, 300, 0.5, n, 16, 1500)))  # fmt: skip
    # Poisson chat traffic, prefill-heavy.
    n = 240
    arr = np.cumsum(rng.exponential(1 / 2.4, n))
    out.append(Workload("poisson", arr, _lognormal(rng, 900, 0.6, n, 32, 3000),
                        _lognormal(rng, 220, 0.6, n, 16, 1000)))  # fmt: skip
    # Long prompts, short answers.
    n = 120
    arr = np.cumsum(rng.exponential(1 / 0.9, n))
    out.append(Workload("long-prompts", arr, _lognormal(rng, 2400, 0.3, n, 500, 3500),
                        _lognormal(rng, 120, 0.5, n, 8, 500)))  # fmt: skip
    # Shared prefixes: every prompt starts with the same 600-token system prompt. The simulator
    # does not model hits across requests; this workload measures what that costs.
    n = 200
    arr = np.cumsum(rng.exponential(1 / 2.0, n))
    out.append(Workload("shared-prefix", arr, 600 + _lognormal(rng, 300, 0.5, n, 16, 1500),
                        _lognormal(rng, 250, 0.5, n, 16, 1000), shared_prefix=600))  # fmt: skip
    return out


SETTINGS = {
    # Per workload: the observed run first, then the settings to predict from it.
    "bursts": [Setting(64, 700, 2048), Setting(16, 700, 2048), Setting(32, 700, 2048),
               Setting(128, 700, 2048), Setting(64, 1400, 2048), Setting(64, 700, 1024)],
    "poisson": [Setting(64, 900, 2048), Setting(8, 900, 2048), Setting(16, 900, 2048),
                Setting(32, 900, 2048), Setting(64, 1800, 2048), Setting(64, 900, 1024)],
    "long-prompts": [Setting(32, 600, 2048), Setting(4, 600, 2048), Setting(8, 600, 2048),
                     Setting(16, 600, 2048), Setting(32, 1200, 2048), Setting(32, 600, 4096)],
    "shared-prefix": [Setting(64, 700, 2048), Setting(8, 700, 2048), Setting(16, 700, 2048),
                      Setting(64, 1400, 2048)],
}  # fmt: skip


def build(setting: Setting, model_dir: str) -> tuple[Any, Any]:
    import torch  # type: ignore[import-not-found]
    from vllm.config import (  # type: ignore[import-not-found]
        CacheConfig,
        DeviceConfig,
        LoadConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.utils.hashing import get_hash_fn_by_name  # type: ignore[import-not-found]
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # type: ignore[import-not-found]
    from vllm.v1.core.sched.scheduler import Scheduler  # type: ignore[import-not-found]
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # type: ignore[import-not-found]
    from vllm.v1.structured_output import StructuredOutputManager  # type: ignore[import-not-found]

    mc = ModelConfig(
        model=model_dir,
        skip_tokenizer_init=True,
        max_model_len=setting.max_model_len,
        dtype="float16",
    )
    sc = SchedulerConfig(
        max_num_seqs=setting.max_num_seqs,
        max_num_batched_tokens=setting.max_num_batched_tokens,
        max_model_len=setting.max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        async_scheduling=False,
    )
    cc = CacheConfig(
        block_size=setting.block_size, gpu_memory_utilization=0.9, enable_prefix_caching=True
    )
    vc = VllmConfig(
        model_config=mc,
        scheduler_config=sc,
        cache_config=cc,
        device_config=DeviceConfig(device="cpu"),
        load_config=LoadConfig(load_format="dummy"),
    )
    vc.cache_config.num_gpu_blocks = setting.num_blocks
    spec = FullAttentionSpec(
        block_size=setting.block_size, num_kv_heads=4, head_size=64, dtype=torch.float16
    )
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(4)]
    kvc = KVCacheConfig(
        num_blocks=setting.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layers, spec)],
    )
    sched = Scheduler(
        vc, kvc, StructuredOutputManager(vc), block_size=setting.block_size, log_stats=True
    )
    hash_fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return sched, get_request_block_hasher(setting.block_size, hash_fn)


def run(wl: Workload, setting: Setting, model_dir: str) -> dict[str, Any]:
    from vllm.sampling_params import SamplingParams  # type: ignore[import-not-found]
    from vllm.v1.outputs import ModelRunnerOutput  # type: ignore[import-not-found]
    from vllm.v1.request import Request  # type: ignore[import-not-found]

    sched, hasher = build(setting, model_dir)
    n = len(wl.arrival)
    rng = np.random.default_rng(5)
    prefix = rng.integers(3, 30000, wl.shared_prefix).tolist()
    reqs: dict[str, Request] = {}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    done: dict[str, float] = {}
    steps = []
    clock, nxt = 0.0, 0
    while len(done) < n:
        while nxt < n and wl.arrival[nxt] <= clock:
            rid = f"req-{nxt}"
            tokens = prefix + rng.integers(3, 30000, int(wl.prompt[nxt]) - len(prefix)).tolist()
            params = SamplingParams(max_tokens=int(wl.output[nxt]), ignore_eos=True)
            req = Request(rid, tokens, params, None, arrival_time=float(wl.arrival[nxt]),
                          block_hasher=hasher)  # fmt: skip
            reqs[rid] = req
            sched.add_request(req)
            nxt += 1
        if not sched.has_requests():
            clock = float(wl.arrival[nxt])
            continue
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = []
        context = 0
        for rid in ids:
            r = reqs[rid]
            context += r.num_computed_tokens
            sampled.append([100] if r.num_computed_tokens >= r.num_tokens else [])
        scheduled = out.total_num_scheduled_tokens
        step = STEP_A + STEP_B * scheduled + STEP_C * context if scheduled else 0.0
        clock += step
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        for rid, toks in zip(ids, sampled, strict=True):
            if toks:
                first.setdefault(rid, clock)
                last[rid] = clock
        sched.update_from_output(out, mro)
        for rid in ids:
            r = reqs[rid]
            if rid not in done and r.is_finished():
                done[rid] = clock
        steps.append(
            {
                "end": round(clock, 6),
                "scheduled_tokens": scheduled,
                "running": len(sched.running),
                "waiting": len(sched.waiting),
            }
        )
        if not scheduled and nxt < n:
            clock = max(clock, float(wl.arrival[nxt]))
    rows = []
    for i in range(n):
        rid = f"req-{i}"
        a, f, e = float(wl.arrival[i]), first[rid], done[rid]
        out_tokens = int(wl.output[i])
        rows.append(
            {
                "request_id": rid,
                "start": (T0 + timedelta(seconds=a)).isoformat(),
                "ttft": round(f - a, 6),
                "e2e": round(e - a, 6),
                "tpot": round((e - f) / (out_tokens - 1), 6) if out_tokens > 1 else None,
                "prompt_tokens": int(wl.prompt[i]),
                "output_tokens": out_tokens,
                "num_preemptions": reqs[rid].num_preemptions,
            }
        )
    return {"rows": rows, "steps": steps, "end": clock}


def summary(rows: list[dict[str, Any]], end: float) -> dict[str, Any]:
    e2e = np.array([r["e2e"] for r in rows])
    start = min((datetime.fromisoformat(r["start"]) - T0).total_seconds() for r in rows)
    span = end - start
    return {
        "requests": len(rows),
        "preemptions": int(sum(r["num_preemptions"] for r in rows)),
        "output_throughput": sum(r["output_tokens"] for r in rows) / span,
        "e2e_p99": float(np.percentile(e2e, 99)),
    }


def write_run(out: Path, wl: Workload, setting: Setting, result: dict[str, Any]) -> None:
    """The files a deployment would show: client rows, per-step records, log lines, /metrics."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "requests.jsonl").open("w") as f:
        for row in result["rows"]:
            f.write(json.dumps(row) + "\n")
    with (out / "steps.jsonl").open("w") as f:
        for row in result["steps"]:
            f.write(json.dumps(row) + "\n")
    args = {
        "model": "tiny-llama",
        "max_model_len": setting.max_model_len,
        "max_num_seqs": setting.max_num_seqs,
        "max_num_batched_tokens": setting.max_num_batched_tokens,
        "block_size": setting.block_size,
    }
    ts = T0 - timedelta(seconds=30)
    stamp = ts.strftime("%m-%d %H:%M:%S")
    tokens = setting.num_blocks * setting.block_size
    conc = tokens / setting.max_model_len
    # The startup lines as vLLM 0.33.0 prints them (messages from its source).
    lines = [
        f"(APIServer pid=1) INFO {stamp} [api_server.py:1839] vLLM API server version {VERSION}",
        f"(APIServer pid=1) INFO {stamp} [utils.py:233] non-default args: {args!r}",
        f"(EngineCore_DP0 pid=312) INFO {stamp} [kv_cache_utils.py:1087] GPU KV cache size: "
        f"{tokens:,} tokens",
        f"(EngineCore_DP0 pid=312) INFO {stamp} [kv_cache_utils.py:1091] Maximum concurrency for "
        f"{setting.max_model_len:,} tokens per request: {conc:.2f}x",
    ]
    (out / "vllm.log").write_text("\n".join(lines) + "\n")
    total = sum(r["num_preemptions"] for r in result["rows"])
    end = T0 + timedelta(seconds=result["end"])
    # Two scrapes, before the traffic and after it: the counter's increase is the run's count.
    snapshots = out / "metrics"
    snapshots.mkdir(exist_ok=True)
    for when, count in ((T0 - timedelta(seconds=20), 0), (end + timedelta(seconds=1), total)):
        (snapshots / f"metrics-{int(when.timestamp())}.prom").write_text(
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
            "# TYPE vllm:num_preemptions_total counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="tiny-llama"}} {float(count)}\n'
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{setting.block_size}",engine="0",'
            f'num_gpu_blocks="{setting.num_blocks}"}} 1.0\n'
        )
    meta = {"workload": wl.name, "setting": setting.__dict__, "end_time": end.isoformat(),
            "truth": summary(result["rows"], result["end"]), "vllm": VERSION,
            "step_cost": {"a": STEP_A, "b_token": STEP_B, "c_context": STEP_C}}  # fmt: skip
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--only")
    args = parser.parse_args()
    model_dir = tempfile.mkdtemp()
    (Path(model_dir) / "config.json").write_text(json.dumps(TINY_LLAMA))
    for wl in workloads():
        if args.only and wl.name != args.only:
            continue
        for k, setting in enumerate(SETTINGS[wl.name]):
            result = run(wl, setting, model_dir)
            name = f"{wl.name}/s{k}-seqs{setting.max_num_seqs}-blocks{setting.num_blocks}" \
                   f"-mbt{setting.max_num_batched_tokens}"  # fmt: skip
            write_run(Path(args.out) / name, wl, setting, result)
            truth = summary(result["rows"], result["end"])
            print(name, json.dumps(truth), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
