"""`preemptscope capacity`: KV blocks, tokens and max concurrency from a model config and a GPU.

The arithmetic is the project's one KV model (analysis/kvmodel.py); this module only reads the
flags and the config file and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl

from preemptscope.analysis import kvmodel
from preemptscope.errors import ConfigError, InputError
from preemptscope.ingest.logs import parse_path


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "capacity",
        help="KV cache blocks, tokens and max concurrency for a model on a GPU",
        description=(
            "Compute what vLLM prints at startup (GPU blocks, 'GPU KV cache size: N tokens', "
            "'Maximum concurrency for L tokens per request: X') from a model's config.json, the "
            "GPU memory and the serving flags. Memory in GiB, as vLLM prints it."
        ),
    )
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--config", metavar="CONFIG_JSON", help="Hugging Face config.json")
    model.add_argument(
        "--model",
        metavar="PRESET",
        help=f"a built-in model shape: {', '.join(sorted(kvmodel.MODEL_PRESETS))}",
    )
    gpu = parser.add_mutually_exclusive_group()
    gpu.add_argument("--gpu-memory-gib", type=float, help="total memory of one GPU, GiB")
    gpu.add_argument(
        "--gpu", metavar="PRESET", help=f"a GPU preset: {', '.join(sorted(kvmodel.GPU_PRESETS))}"
    )
    gpu.add_argument(
        "--kv-memory-gib",
        type=float,
        help="skip the memory profile: KV memory per GPU as vLLM logged it "
        "('Available KV cache memory', or --kv-cache-memory)",
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument(
        "--weights-gib", type=float, help="weights per GPU (default: from the parameter count)"
    )
    parser.add_argument(
        "--activation-gib",
        type=float,
        default=kvmodel.DEFAULT_ACTIVATION_GIB,
        help="activation peak per GPU (vLLM's profile; default %(default)s)",
    )
    parser.add_argument(
        "--non-torch-gib",
        type=float,
        default=kvmodel.DEFAULT_NON_TORCH_GIB,
        help="non-torch memory per GPU (NCCL, CUDA context; default %(default)s)",
    )
    parser.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=1)
    parser.add_argument("--pp", "--pipeline-parallel-size", dest="pp", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument(
        "--context-len",
        type=int,
        help="tokens per request for max concurrency (default: the model's max positions)",
    )
    parser.add_argument("--dtype", help="model dtype (default: the config's torch_dtype)")
    parser.add_argument("--kv-cache-dtype", help="KV dtype, e.g. fp8 (default: the model dtype)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="also print the gpu_memory_utilization needed for this many full-length requests",
    )
    parser.add_argument(
        "--log",
        metavar="VLLM_LOG",
        help="compare with the startup lines of a vLLM log (GPU blocks, KV cache size, maximum "
        "concurrency); without GPU flags, its logged KV memory and context length are used",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def load_model(args: argparse.Namespace) -> kvmodel.ModelSpec:
    if args.model:
        return kvmodel.model_preset(args.model)
    path = Path(args.config)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"not JSON: {exc.msg}", exc.lineno) from None
    if not isinstance(config, dict):
        raise InputError(str(path), "expected a JSON object (a Hugging Face config.json)", 1)
    try:
        return kvmodel.ModelSpec.from_hf_config(config, name=path.parent.name, dtype=args.dtype)
    except ConfigError as exc:
        raise InputError(str(path), str(exc)) from None


KV_ONLY = "given KV memory"
LOGGED_KINDS = {
    "gpu_blocks": "num_gpu_blocks",
    "kv_cache_tokens": "kv_cache_tokens",
    "max_concurrency": "max_concurrency",
    "available_kv_memory": "kv_memory_gib",
    "memory_for_kv": "kv_memory_gib",
}


def logged_capacity(path: str) -> dict[str, float]:
    """The last KV-sizing figures a vLLM log printed (names as in `compute`'s output)."""
    frame = parse_path(path)["kv_capacity"].filter(pl.col("value").is_not_null())
    found: dict[str, float] = {}
    for kind, value, context in frame.select("kind", "value", "context_tokens").iter_rows():
        if kind in LOGGED_KINDS:
            found[LOGGED_KINDS[kind]] = float(value)
        if kind == "max_concurrency" and context:
            found["context_len"] = float(context)
    if not found:
        raise InputError(path, "no KV-sizing lines (GPU blocks, KV cache size, ...) in this log")
    return found


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """The capacity figures for the parsed flags, as a JSON-ready dict."""
    logged = logged_capacity(args.log) if args.log else None
    if logged is not None:
        no_gpu = args.gpu is None and args.gpu_memory_gib is None and args.kv_memory_gib is None
        if no_gpu and "kv_memory_gib" in logged:
            args.kv_memory_gib = logged["kv_memory_gib"]
        if args.context_len is None and "context_len" in logged:
            args.context_len = int(logged["context_len"])
    out = _compute(args)
    if logged is not None:
        out["logged"] = logged
    return out


def _compute(args: argparse.Namespace) -> dict[str, Any]:
    model = load_model(args)
    kv_dtype = kvmodel.dtype_bytes(args.kv_cache_dtype) if args.kv_cache_dtype else None
    context = args.context_len or model.max_position_embeddings
    if context is None:
        raise ConfigError("--context-len is needed: the config has no max_position_embeddings")
    common: dict[str, Any] = {
        "tp": args.tp,
        "pp": args.pp,
        "block_size": args.block_size,
        "kv_dtype_bytes": kv_dtype,
    }
    if args.kv_memory_gib is not None:
        # The logged KV memory is the whole budget: a "GPU" of that size with nothing else on it.
        gpu = kvmodel.GpuSpec(KV_ONLY, args.kv_memory_gib, 0.0, 0.0)
        memory: dict[str, Any] = {
            "gpu_memory_utilization": 1.0,
            "weights_gib": 0.0,
            "activation_gib": 0.0,
            "non_torch_gib": 0.0,
        }
    else:
        if args.gpu:
            gpu = kvmodel.gpu_preset(args.gpu)
        elif args.gpu_memory_gib is not None:
            gpu = kvmodel.GpuSpec("GPU", args.gpu_memory_gib, 0.0, 0.0)
        else:
            raise ConfigError("give --gpu-memory-gib, --gpu PRESET or --kv-memory-gib")
        memory = {
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "weights_gib": args.weights_gib,
            "activation_gib": args.activation_gib,
            "non_torch_gib": args.non_torch_gib,
        }
    result = kvmodel.kv_capacity(model, gpu, context_len=context, **memory, **common)
    out: dict[str, Any] = {
        "model": model.name,
        "gpu": gpu.name,
        "gpu_memory_gib": gpu.memory_gib,
        **{k: v for k, v in memory.items()},
        "tensor_parallel_size": args.tp,
        "pipeline_parallel_size": args.pp,
        **asdict(result),
    }
    if args.concurrency:
        tokens = args.concurrency * context
        if args.kv_memory_gib is not None:
            out["needed_kv_memory_gib"] = (
                kvmodel.blocks_for_tokens(tokens, args.block_size)
                * args.block_size
                * result.bytes_per_token
                / kvmodel.GIB
            )
        else:
            out["needed_gpu_memory_utilization"] = kvmodel.utilization_for_tokens(
                model,
                gpu,
                tokens,
                **{k: v for k, v in memory.items() if k != "gpu_memory_utilization"},
                **common,
            )
        out["concurrency"] = args.concurrency
    return out


def render(out: dict[str, Any]) -> str:
    lines = [
        f"model                {out['model']}",
        f"GPU                  {out['gpu']} ({out['gpu_memory_gib']:.2f} GiB), "
        f"tp={out['tensor_parallel_size']} pp={out['pipeline_parallel_size']}",
        f"weights per GPU      {out['weights_gib']:.2f} GiB"
        if out["gpu"] != KV_ONLY
        else "weights per GPU      - (the KV memory is given)",
        f"KV memory per GPU    {out['kv_memory_gib']:.2f} GiB "
        f"({out['bytes_per_token']:,.0f} bytes per token)",
        f"GPU blocks           {out['num_gpu_blocks']:,} of {out['block_size']} tokens",
        f"GPU KV cache size    {out['kv_cache_tokens']:,} tokens",
        f"Maximum concurrency  {out['max_concurrency']:.2f}x for {out['context_len']:,} tokens "
        "per request",
    ]
    if "needed_gpu_memory_utilization" in out:
        need = out["needed_gpu_memory_utilization"]
        fits = "" if need <= 1.0 else " (does not fit on this GPU: more GPUs needed)"
        lines.append(
            f"needed for {out['concurrency']} such requests: "
            f"--gpu-memory-utilization {need:.4f}{fits}"
        )
    if "needed_kv_memory_gib" in out:
        lines.append(
            f"needed for {out['concurrency']} such requests: "
            f"{out['needed_kv_memory_gib']:.2f} GiB of KV memory"
        )
    if "logged" in out:
        logged = out["logged"]
        lines.append("logged by vLLM:")
        for key, label, fmt in (
            ("num_gpu_blocks", "GPU blocks", "{:,.0f}"),
            ("kv_cache_tokens", "GPU KV cache size", "{:,.0f} tokens"),
            ("max_concurrency", "Maximum concurrency", "{:.2f}x"),
            ("kv_memory_gib", "KV memory", "{:.2f} GiB"),
        ):
            if key in logged:
                computed = out[key]
                diff = f" (computed {fmt.format(computed)})" if computed is not None else ""
                lines.append(f"  {label:<21}{fmt.format(logged[key])}{diff}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(out))
    return 0
