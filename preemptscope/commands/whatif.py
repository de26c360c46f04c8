"""`preemptscope whatif`: replay an observed workload under other vLLM settings.

The workload comes from a `vllm bench serve --save-detailed` JSON (exact arrivals and lengths)
or from a vLLM log (arrivals from request lines, or a rate from the stats; lengths from the
throughput totals). The deployment's current settings come from the log (KV blocks, flags) or
from flags here. The simulator (preemptscope.analysis.sim.whatif.predict) does the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from preemptscope.analysis.analyze import capacity_facts
from preemptscope.analysis.kvmodel import GPU_PRESETS, MODEL_PRESETS, gpu_preset, model_preset
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.whatif import (
    WhatIfOutcome,
    WhatIfResult,
    fmt_seconds,
    predict,
    replay_from_log,
    sweep,
)
from preemptscope.analysis.sim.workload import Workload, from_bench_result
from preemptscope.commands.capacity import load_model
from preemptscope.commands.report import parse_duration
from preemptscope.errors import ConfigError, InputError
from preemptscope.ingest.logs import ParseOptions, parse_path

# Flags the user may change, as vLLM spells them, with their types.
CHANGEABLE: dict[str, type] = {
    "max_num_seqs": int,
    "gpu_memory_utilization": float,
    "max_num_batched_tokens": int,
    "tensor_parallel_size": int,
    "block_size": int,
    "max_model_len": int,
    "num_gpu_blocks_override": int,
    "scheduling_policy": str,
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "whatif",
        help="predict preemptions, throughput and p99 under other vLLM settings",
        description=(
            "Replay an observed workload through the scheduler simulator twice: with the "
            "current settings and with the ones given, and compare. Settings not given stay."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--bench", metavar="FILE", help="vllm bench serve --save-detailed JSON")
    source.add_argument("--log", metavar="FILE", help="a vLLM server log")
    model = parser.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        help="model preset for memory and step time (default llama-3.1-8b: "
        f"{', '.join(sorted(MODEL_PRESETS))})",
    )
    model.add_argument("--config", metavar="CONFIG_JSON", help="or a Hugging Face config.json")
    parser.add_argument("--dtype", help="with --config: model dtype (default: torch_dtype)")
    parser.add_argument(
        "--gpu",
        default="A100-80G",
        help=f"GPU preset for memory and step time ({', '.join(sorted(GPU_PRESETS))})",
    )
    parser.add_argument(
        "--current",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="a current setting the input does not show, e.g. max_num_seqs=256 (repeatable)",
    )
    for flag, kind in CHANGEABLE.items():
        parser.add_argument(
            "--" + flag.replace("_", "-"),
            dest=flag,
            type=kind,
            help=f"new {flag}",
        )
    parser.add_argument(
        "--sweep-max-num-seqs",
        metavar="N,N,...",
        help="also predict a curve over these max_num_seqs values",
    )
    parser.add_argument(
        "--output-len",
        type=float,
        help="mean output tokens per request, for logs without request lines",
    )
    parser.add_argument("--year", type=int, help="year of the log's year-less timestamps")
    parser.add_argument("--limit", default=None, help="stop the replay after this long (e.g. 2h)")
    parser.add_argument("--seed", type=int, default=0, help="seed for sampled lengths (default 0)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def _parse_current(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or key not in CHANGEABLE:
            raise ConfigError(
                f"--current {item!r}: expected FLAG=VALUE with FLAG one of {sorted(CHANGEABLE)}"
            )
        try:
            out[key] = CHANGEABLE[key](value)
        except ValueError:
            raise ConfigError(f"--current {item!r}: {value!r} is not a valid {key}") from None
    return out


def load_workload(args: argparse.Namespace, base: SimConfig) -> tuple[Workload, SimConfig]:
    """The workload to replay and the current configuration, from the given input."""
    if args.bench:
        path = Path(args.bench)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(args.bench, f"cannot read: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise InputError(args.bench, f"not JSON: {exc.msg}", exc.lineno) from None
        if isinstance(data, list):
            if not data:
                raise InputError(args.bench, "empty list of results")
            data = data[-1]
        if not isinstance(data, dict):
            raise InputError(args.bench, "expected a vllm bench serve result object")
        return from_bench_result(data, source=args.bench), base
    frames = parse_path(args.log, options=ParseOptions(year=args.year))
    capacity = capacity_facts([frames], None, None, [])
    return replay_from_log(
        frames, capacity, base=base, output_tokens=args.output_len, seed=args.seed
    )


def run(args: argparse.Namespace) -> int:
    current = _parse_current(args.current)
    model = load_model(args) if args.model or args.config else model_preset("llama-3.1-8b")
    base = SimConfig(model=model, gpu=gpu_preset(args.gpu))
    workload, base = load_workload(args, base)
    if current:
        base = base.with_changes(current)
    changes = {k: getattr(args, k) for k in CHANGEABLE if getattr(args, k) is not None}
    if not changes and not args.sweep_max_num_seqs:
        raise ConfigError("nothing to change: give e.g. --max-num-seqs 64 or --sweep-max-num-seqs")
    limit = parse_duration(args.limit) if args.limit else None
    result = predict(workload, changes, base=base, until=limit) if changes else None
    curve: list[WhatIfOutcome] = []
    if args.sweep_max_num_seqs:
        try:
            values = [int(v) for v in args.sweep_max_num_seqs.split(",") if v.strip()]
        except ValueError:
            raise ConfigError("--sweep-max-num-seqs expects integers, e.g. 16,32,64") from None
        curve = sweep(workload, "max_num_seqs", values, base=base, until=limit)
    if args.json:
        body: dict[str, Any] = {"workload": workload.description}
        if result is not None:
            body["whatif"] = result.to_dict()
        if curve:
            body["sweep"] = [
                {"max_num_seqs": o.settings["max_num_seqs"], **o.__dict__} for o in curve
            ]
        json.dump(body, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    console = Console()
    console.print(f"Workload: {len(workload)} requests ({_describe(workload)})")
    if result is not None:
        console.print(_comparison(result))
    if curve:
        console.print(_curve(curve))
    console.print(
        "[dim]Predictions come from the scheduler simulator (docs/simulator.md): relative "
        "changes are more trustworthy than absolute latencies.[/dim]"
    )
    return 0


def _describe(workload: Workload) -> str:
    desc = workload.description
    basis = desc.get("basis") or desc.get("arrivals") or desc.get("kind", "")
    return str(basis)


def _row(label: str, o: WhatIfOutcome) -> list[str]:
    return [
        label,
        f"{o.kv_cache_tokens:,}",
        f"{o.preemptions:,}",
        f"{o.preempted_requests:,}",
        f"{o.output_throughput:,.0f}",
        fmt_seconds(o.e2e_mean),
        fmt_seconds(o.e2e_p99),
        fmt_seconds(o.ttft_p99),
        f"{o.finished}",
    ]


_COLUMNS = ("", "KV tok", "preempt", "victims", "tok/s", "e2e", "e2e p99", "ttft p99", "done")


def _comparison(result: WhatIfResult) -> Table:
    changes = ", ".join(f"{k}={v}" for k, v in result.changes.items())
    table = Table(title=f"What if {changes}?")
    for column in _COLUMNS:
        table.add_column(column, justify="right")
    table.add_row(*_row("now", result.baseline))
    table.add_row(*_row("new", result.candidate))
    return table


def _curve(curve: list[WhatIfOutcome]) -> Table:
    table = Table(title="max_num_seqs sweep")
    for column in ("seqs", *_COLUMNS[1:]):
        table.add_column(column, justify="right")
    for o in curve:
        table.add_row(*_row(str(o.settings["max_num_seqs"]), o))
    return table
