"""`preemptscope whatif`: replay an observed workload under other vLLM settings.

Takes the same inputs as `report` (--log, --metrics, --bench, in any combination): the workload
is the client's requests (bench JSON, CSV/JSONL rows) or the log's (arrivals from request lines,
lengths from the throughput totals); the settings are what the data shows (KV blocks, flags);
the step cost is fitted from the data's own timings (analysis/sim/calibrate.py). Presets apply
only where nothing is observed, and the output says so. Every run prints the replay of *now*
beside what was observed, so the fit's error is in plain sight.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from preemptscope import jsonout
from preemptscope.analysis.analyze import AnalysisParams, analyze_deployment
from preemptscope.analysis.kvmodel import GPU_PRESETS, MODEL_PRESETS, gpu_preset
from preemptscope.analysis.sim.closedloop import closed_loop
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.observed import (
    Replay,
    build_replay,
    check_changes,
    describe_cost,
    fit_line,
    hit_rate_note,
    replay_inputs,
)
from preemptscope.analysis.sim.whatif import WhatIfOutcome, fmt_seconds
from preemptscope.commands.capacity import load_model
from preemptscope.commands.report import parse_duration
from preemptscope.errors import ConfigError
from preemptscope.ingest.logs import ParseOptions
from preemptscope.inputs import LoadOptions, load_inputs


def _switch(text: str) -> bool:
    """A vLLM boolean flag's value: true/false (also 1/0, yes/no)."""
    value = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if text.strip().lower() not in value:
        raise ValueError(text)
    return value[text.strip().lower()]


# Flags the user may change, as vLLM spells them, with their types.
CHANGEABLE: dict[str, Callable[[str], Any]] = {
    "max_num_seqs": int,
    "gpu_memory_utilization": float,
    "max_num_batched_tokens": int,
    "tensor_parallel_size": int,
    "block_size": int,
    "max_model_len": int,
    "num_gpu_blocks_override": int,
    "scheduling_policy": str,
    "watermark": float,
    "enable_prefix_caching": _switch,
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
    parser.add_argument(
        "--log", action="append", default=[], metavar="PATH", help="vLLM log file(s) (repeatable)"
    )
    parser.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="PATH",
        help="/metrics snapshot file or directory (repeatable)",
    )
    parser.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="FILE",
        help="vllm bench serve --save-detailed JSON, GuideLLM, CSV/JSONL request rows",
    )
    parser.add_argument("--deployment", help="which deployment, when the inputs name several")
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
        help="GPU preset, used only where the data shows nothing (step times with no timings "
        f"to fit, memory): {', '.join(sorted(GPU_PRESETS))}; default A100-80G, said when used",
    )
    parser.add_argument(
        "--current",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="a current setting no input shows, e.g. max_num_seqs=256 (repeatable; what the "
        "data shows wins)",
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


def load_replay(args: argparse.Namespace) -> tuple[Replay, list[str]]:
    """The deployment the inputs show, ready to replay, and the input paths."""
    if not (args.log or args.metrics or args.bench):
        raise ConfigError("nothing to replay: give --log, --metrics and/or --bench")
    options = LoadOptions(parse=ParseOptions(year=args.year))
    deployments = load_inputs(args.log, args.metrics, args.bench, options=options)
    if args.deployment:
        chosen = [d for d in deployments if d.name == args.deployment]
        if not chosen:
            names = ", ".join(d.name for d in deployments)
            raise ConfigError(f"--deployment {args.deployment!r}: the inputs name {names}")
        item = chosen[0]
    elif len(deployments) > 1:
        names = ", ".join(d.name for d in deployments)
        raise ConfigError(
            f"the inputs name several deployments ({names}): pick one with --deployment"
        )
    else:
        item = deployments[0]
    report = analyze_deployment(item, AnalysisParams())
    presets_given = bool(args.model or args.config or args.gpu)
    base = SimConfig()
    if args.model or args.config:
        base = SimConfig(model=load_model(args))
    if args.gpu:
        base = SimConfig(model=base.model, gpu=gpu_preset(args.gpu))
    replay = build_replay(
        report.capacity,
        replay_inputs(item),
        preemptions=report.preemptions.total,
        base=base,
        current=_parse_current(args.current),
        presets_given=presets_given,
        output_tokens=args.output_len,
        seed=args.seed,
    )
    return replay, [s.path for s in item.sources]


def run(args: argparse.Namespace) -> int:
    changes = {k: getattr(args, k) for k in CHANGEABLE if getattr(args, k) is not None}
    if not changes and not args.sweep_max_num_seqs:
        raise ConfigError("nothing to change: give e.g. --max-num-seqs 64 or --sweep-max-num-seqs")
    values: list[int] = []
    if args.sweep_max_num_seqs:
        try:
            values = [int(v) for v in args.sweep_max_num_seqs.split(",") if v.strip()]
        except ValueError:
            raise ConfigError("--sweep-max-num-seqs expects integers, e.g. 16,32,64") from None
        if not values or min(values) < 1:
            raise ConfigError("--sweep-max-num-seqs expects values >= 1, e.g. 16,32,64")
    replay, sources = load_replay(args)
    if not replay.replayable or replay.workload is None:
        raise ConfigError(
            "nothing to replay: "
            + "; ".join(replay.assumptions[-1:])
            + " (give --bench with per-request results, or a log with request lines)"
        )
    check_changes(replay, changes)
    until = parse_duration(args.limit) if args.limit else None
    # The step cost whose replay of now reproduces the observed figures (closedloop.py).
    loop = closed_loop(replay, until=until)
    replay, now, check = loop.replay, loop.now, loop.residual
    candidate = replay.run(changes, until=until) if changes else None
    curve = [replay.run({"max_num_seqs": v}, until=until) for v in values]
    workload = replay.workload
    if workload is None:  # closed_loop keeps the workload: only the step cost moves
        raise ConfigError("nothing to replay: no request data")
    notes = [*replay.assumptions]
    if (sharing := hit_rate_note(replay, now)) is not None:
        notes.append(sharing)
    if changes.get("enable_prefix_caching") and not replay.config.enable_prefix_caching:
        notes.append(
            "prefix caching is off in the data, so no hits were counted: the prediction with it "
            "on shares no prefix across requests (only a victim gets its own blocks back)"
        )
    if args.json:
        body: dict[str, Any] = {
            "sources": sources,
            "workload": workload.description,
            "settings": now.settings,
            "calibration": describe_cost(replay.config),
            "step_cost": _cost_dict(replay),
            "assumptions": notes,
            "observed": replay.observed.__dict__,
            "now": now.__dict__,
            "fidelity": check.to_dict(),
            "closed_loop": {
                "replays": loop.replays,
                "multipliers": dict(
                    zip(("all", "per_step", "per_prefill_token"), loop.multipliers, strict=True)
                ),
                "summary": loop.describe(),
            },
        }
        if candidate is not None:
            body["whatif"] = {
                "changes": changes,
                "baseline": now.__dict__,
                "candidate": candidate.__dict__,
                "workload": workload.description,
            }
        if curve:
            body["sweep"] = [
                {"max_num_seqs": o.settings["max_num_seqs"], **o.__dict__} for o in curve
            ]
        jsonout.dump(body, sys.stdout, default=str)
        return 0
    console = Console()
    console.print(f"Inputs: {', '.join(sources)}")
    console.print(f"Workload: {len(workload)} requests ({replay.workload_basis})")
    console.print(f"Step cost: {describe_cost(replay.config)}")
    for note in notes:
        console.print(f"[yellow]Assumed:[/yellow] {note}")
    console.print(_fit_table(replay, now))
    console.print(f"Calibration: {loop.describe()}")
    if candidate is not None:
        console.print(_comparison(changes, now, candidate))
        if now.per_priority or candidate.per_priority:
            console.print(_classes(replay, now, candidate))
    if curve:
        console.print(_curve(curve))
        if any(o.per_priority for o in curve):
            console.print(_curve_classes(curve))
    console.print(
        "[dim]Predictions come from the scheduler simulator (docs/simulator.md); the replay of "
        "now beside the observed figures shows how far to trust them.[/dim]"
    )
    return 0


def _cost_dict(replay: Replay) -> dict[str, Any] | None:
    cost = replay.config.step_cost
    return None if cost is None else dict(cost.__dict__)


def _fit_table(replay: Replay, now: WhatIfOutcome) -> Table:
    table = Table(title="Observed vs replayed now")
    for column in ("", "observed", "replay of now"):
        table.add_column(column, justify="right")
    for row in fit_line(replay, now):
        table.add_row(*row)
    return table


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


def _comparison(changes: dict[str, Any], now: WhatIfOutcome, new: WhatIfOutcome) -> Table:
    text = ", ".join(f"{k}={v}" for k, v in changes.items())
    table = Table(title=f"What if {text}?")
    for column in _COLUMNS:
        table.add_column(column, justify="right")
    table.add_row(*_row("now", now))
    table.add_row(*_row("new", new))
    return table


def _classes(replay: Replay, now: WhatIfOutcome, new: WhatIfOutcome) -> Table:
    """Per priority class: observed, now and new e2e / TTFT p99 and preemptions."""
    table = Table(title="Per priority class (lower is served first under priority)")
    for column in (
        "priority",
        "requests",
        "e2e p99 seen",
        "e2e p99 now",
        "e2e p99 new",
        "ttft p99 now",
        "ttft p99 new",
        "preempt now",
        "preempt new",
    ):
        table.add_column(column, justify="right")
    seen = replay.observed.per_priority
    for cls in sorted(set(now.per_priority) | set(new.per_priority), key=int):
        a, b, o = now.per_priority.get(cls, {}), new.per_priority.get(cls, {}), seen.get(cls, {})

        def sec(v: float | int | None) -> str:
            return fmt_seconds(None if v is None else float(v))

        table.add_row(
            cls,
            f"{a.get('requests', b.get('requests', 0))}",
            sec(o.get("e2e_p99")),
            sec(a.get("e2e_p99")),
            sec(b.get("e2e_p99")),
            sec(a.get("ttft_p99")),
            sec(b.get("ttft_p99")),
            f"{a.get('preemptions', '-')}",
            f"{b.get('preemptions', '-')}",
        )
    return table


def _curve(curve: list[WhatIfOutcome]) -> Table:
    table = Table(title="max_num_seqs sweep")
    for column in ("seqs", *_COLUMNS[1:]):
        table.add_column(column, justify="right")
    for o in curve:
        table.add_row(*_row(str(o.settings["max_num_seqs"]), o))
    return table


def _curve_classes(curve: list[WhatIfOutcome]) -> Table:
    """The sweep per priority class: each max_num_seqs's requests, p99s and preemptions."""
    table = Table(title="max_num_seqs sweep per priority class")
    for column in ("seqs", "priority", "requests", "e2e p99", "ttft p99", "preempt"):
        table.add_column(column, justify="right")
    for o in curve:
        for i, cls in enumerate(sorted(o.per_priority, key=int)):
            c = o.per_priority[cls]
            e2e, ttft = c.get("e2e_p99"), c.get("ttft_p99")
            table.add_row(
                str(o.settings["max_num_seqs"]) if i == 0 else "",
                cls,
                f"{c.get('requests', '-')}",
                fmt_seconds(None if e2e is None else float(e2e)),
                fmt_seconds(None if ttft is None else float(ttft)),
                f"{c.get('preemptions', '-')}",
            )
    return table
