"""`preemptscope capacity`: KV blocks, tokens and max concurrency from a model config and a GPU.

The arithmetic is the project's one KV model (analysis/kvmodel.py); this module only reads the
flags and the config file and prints.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl

from preemptscope import jsonout
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
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="share of the GPU memory vLLM may use (default: as logged with --log, else 0.9)",
    )
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
    parser.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        type=int,
        help="default: as logged with --log, else 1",
    )
    parser.add_argument(
        "--pp",
        "--pipeline-parallel-size",
        dest="pp",
        type=int,
        help="default: as logged with --log, else 1",
    )
    parser.add_argument("--block-size", type=int, help="default: as logged with --log, else 16")
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


DEFAULT_UTILIZATION = 0.9

# (flag, attribute, smallest value, whether the smallest value itself is allowed)
_LIMITS: tuple[tuple[str, str, float, bool], ...] = (
    ("--gpu-memory-gib", "gpu_memory_gib", 0.0, False),
    ("--kv-memory-gib", "kv_memory_gib", 0.0, False),
    ("--weights-gib", "weights_gib", 0.0, True),
    ("--activation-gib", "activation_gib", 0.0, True),
    ("--non-torch-gib", "non_torch_gib", 0.0, True),
    ("--tp", "tp", 1, True),
    ("--pp", "pp", 1, True),
    ("--block-size", "block_size", 1, True),
    ("--context-len", "context_len", 1, True),
    ("--concurrency", "concurrency", 1, True),
)


def check_args(args: argparse.Namespace) -> None:
    """Reject values that mean nothing (ConfigError: one line, exit 2) before any arithmetic."""
    for flag, attribute, low, inclusive in _LIMITS:
        value = getattr(args, attribute)
        if value is None:
            continue
        if not math.isfinite(value) or value < low or (value == low and not inclusive):
            bound = f">= {low:g}" if inclusive else f"> {low:g}"
            raise ConfigError(f"{flag} must be {bound}, got {value:g}")
    util = args.gpu_memory_utilization
    if util is not None and not (math.isfinite(util) and 0.0 < util <= 1.0):
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {util:g}")


def model_name(config: dict[str, Any], path: Path) -> str:
    """What the config calls the model: its hub name, else its architecture or type."""
    text = config.get("text_config")
    for source in (config, text if isinstance(text, dict) else {}):
        name = source.get("_name_or_path")
        if isinstance(name, str) and name.strip().strip("/"):
            return name.strip().rstrip("/")
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type:
        return model_type
    return str(path)


def _config_path(raw: str) -> Path:
    path = Path(raw)
    # A model directory (as downloaded from the Hub) holds its config.json.
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    return path


def load_model(args: argparse.Namespace) -> kvmodel.ModelSpec:
    if args.model:
        return kvmodel.model_preset(args.model)
    path = _config_path(args.config)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if b"\x00" in data[:8192]:
        raise InputError(str(path), "binary data, not a Hugging Face config.json")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            str(path), f"not UTF-8 text (byte {exc.start}): expected a Hugging Face config.json"
        ) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"not JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise InputError(str(path), "not JSON: nested too deeply") from None
    if not isinstance(config, dict):
        raise InputError(str(path), "expected a JSON object (a Hugging Face config.json)", 1)
    try:
        return kvmodel.ModelSpec.from_hf_config(
            config, name=model_name(config, path), dtype=args.dtype
        )
    except ConfigError as exc:
        raise InputError(str(path), str(exc)) from None


KV_ONLY = "given KV memory"
LOGGED_KINDS = {
    "gpu_blocks": "num_gpu_blocks",
    "kv_cache_tokens": "kv_cache_tokens",
    "max_concurrency": "max_concurrency",
    "available_kv_memory": "kv_memory_gib",
    "memory_for_kv": "kv_memory_gib",
    "memory_total": "gpu_memory_gib",
    "gpu_memory_utilization": "gpu_memory_utilization",
}


# Serving settings a log's config lines give, used when the flag is not given.
LOGGED_SETTINGS = {
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "block_size": "block_size",
    "kv_cache_dtype": "kv_cache_dtype",
}
DEFAULTS = {"tp": 1, "pp": 1, "block_size": 16}


def logged_settings(path: str) -> dict[str, int | str]:
    """The last tensor/pipeline parallel size, block size and KV dtype a log's config printed."""
    config = parse_path(path)["config"]
    found: dict[str, int | str] = {}
    for key, value in config.select("key", "value").iter_rows():
        if key not in LOGGED_SETTINGS or value is None:
            continue
        name = LOGGED_SETTINGS[key]
        if name == "kv_cache_dtype":
            # auto: the model's dtype, as without the flag; a dtype the model does not know
            # (a fork's) is left to --kv-cache-dtype rather than failing on the user's behalf
            if value != "auto" and value.lower().removeprefix("torch.") in kvmodel.DTYPE_BYTES:
                found[name] = value
        elif value.isdigit() and int(value) > 0:
            found[name] = int(value)
    return found


def logged_capacity(path: str) -> dict[str, float]:
    """The last KV-sizing figures a vLLM log printed (names as in `compute`'s output)."""
    frames = parse_path(path)
    frame = frames["kv_capacity"].filter(pl.col("value").is_not_null())
    found: dict[str, float] = {}
    for kind, value, context in frame.select("kind", "value", "context_tokens").iter_rows():
        if kind in LOGGED_KINDS:
            found[LOGGED_KINDS[kind]] = float(value)
        if kind == "max_concurrency" and context:
            found["context_len"] = float(context)
    if found and "context_len" not in found:
        # No concurrency line: the served length, if the log says it (`max_model_len`).
        config = frames["config"].filter(pl.col("key") == "max_model_len")["value"]
        lengths = [int(v) for v in config.to_list() if v.isdigit() and int(v) > 0]
        if lengths:
            found["context_len"] = float(lengths[-1])
    if not found:
        raise InputError(path, "no KV-sizing lines (GPU blocks, KV cache size, ...) in this log")
    return found


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """The capacity figures for the parsed flags, as a JSON-ready dict."""
    check_args(args)
    args.context_source = None
    logged = logged_capacity(args.log) if args.log else None
    if logged is not None:
        no_gpu = args.gpu is None and args.gpu_memory_gib is None and args.kv_memory_gib is None
        if no_gpu and "kv_memory_gib" in logged:
            args.kv_memory_gib = logged["kv_memory_gib"]
        elif no_gpu and "gpu_memory_gib" in logged:
            # `Free memory on device (free/total GiB)` or a V0 memory profile: the GPU's size.
            args.gpu_memory_gib = logged["gpu_memory_gib"]
        if args.gpu_memory_utilization is None and "gpu_memory_utilization" in logged:
            args.gpu_memory_utilization = logged["gpu_memory_utilization"]
        if args.context_len is None and "context_len" in logged:
            args.context_len = int(logged["context_len"])
            args.context_source = "log"
    if args.gpu_memory_utilization is None:
        args.gpu_memory_utilization = DEFAULT_UTILIZATION
    taken: dict[str, int | str] = {}
    if args.log:
        for name, value in logged_settings(args.log).items():
            if getattr(args, name) is None:
                setattr(args, name, value)
                taken[name] = value
    for name, default in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    out = _compute(args)
    if logged is not None:
        out["logged"] = logged
        out["settings_from_log"] = taken
        logged_context = logged.get("context_len")
        if "max_concurrency" in logged and logged_context and logged_context != out["context_len"]:
            # Concurrency depends on the request length: compare at the length vLLM logged.
            out["max_concurrency_at_logged_context"] = out["kv_cache_tokens"] / logged_context
    return out


def _compute(args: argparse.Namespace) -> dict[str, Any]:
    model = load_model(args)
    kv_dtype = kvmodel.dtype_bytes(args.kv_cache_dtype) if args.kv_cache_dtype else None
    context = args.context_len or model.max_position_embeddings
    context_source = args.context_source or ("flag" if args.context_len else "model")
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
        # where context_len came from: "flag", "log" or "model" (max_position_embeddings)
        "context_source": context_source,
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


_CONTEXT_NOTES = {
    "flag": "",
    "log": " (the length in the log)",
    "model": " (the model's max_position_embeddings: --context-len sets vLLM's --max-model-len)",
}


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
        f"per request{_CONTEXT_NOTES[out['context_source']]}",
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
            if key not in logged:
                continue
            computed = out[key]
            diff = f" (computed {fmt.format(computed)})" if computed is not None else ""
            if key == "max_concurrency" and "max_concurrency_at_logged_context" in out:
                at = int(logged["context_len"])
                diff = (
                    f" for {at:,} tokens per request (computed "
                    f"{fmt.format(out['max_concurrency_at_logged_context'])} at that length; "
                    f"{fmt.format(computed)} above is for {out['context_len']:,})"
                )
            lines.append(f"  {label:<21}{fmt.format(logged[key])}{diff}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.json:
        jsonout.dump(out, sys.stdout)
    else:
        print(render(out))
    return 0
