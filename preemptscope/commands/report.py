"""`preemptscope report`: logs + /metrics + client results in, verdict, evidence and advice out.

`load_inputs` (reusable by the demo and the API) joins everything given for one deployment into
one DeploymentInputs; the analysis itself is preemptscope.analysis.analyze.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rich.console import Console

from preemptscope import settings
from preemptscope.analysis.analyze import AnalysisParams, DeploymentInputs, analyze
from preemptscope.analysis.kvmodel import gpu_preset, model_preset
from preemptscope.analysis.render import render_report
from preemptscope.analysis.report import DeploymentReport, Report, SourceSummary
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.whatif import WhatIfOutcome, base_from_capacity, sweep
from preemptscope.analysis.sim.workload import Workload
from preemptscope.errors import ConfigError, InputError, PreemptscopeError
from preemptscope.ingest import bench, metrics
from preemptscope.ingest.logs import ParseOptions, iter_log_paths, parse_path
from preemptscope.ingest.schema import LogFrames

# Severity order for --fail-on: "at_risk" also fails on "over_capacity".
SEVERITY = {"ok": 0, "at_risk": 1, "over_capacity": 2}
FAIL_ON = ("over_capacity", "at_risk", "insufficient_data")
EXIT_FAIL_ON = 3
SCRAPE_TIMEOUT_S = 10.0
# The what-if's step-time model when the flags do not say (as `preemptscope whatif`).
DEFAULT_WHATIF_MODEL = "llama-3.1-8b"
DEFAULT_WHATIF_GPU = "A100-80G"
# Fewer client requests with token counts than this make no workload worth replaying.
MIN_WHATIF_REQUESTS = 10
_NAME = re.compile(r"^[\w.@:-]+$")


def parse_duration(text: str) -> float:
    """ "60s", "5m", "1h", "500ms" or seconds -> seconds (> 0): one syntax for every command."""
    try:
        return settings.parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"bad duration: {exc}") from None


def parse_time(text: str) -> datetime:
    """ISO 8601; a time without a zone is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"bad time {text!r}: expected ISO 8601, e.g. 2026-11-20T10:00:00Z"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def split_spec(spec: str) -> tuple[str, str | None]:
    """ "PATH=NAME" -> (PATH, NAME); a path or URL that itself contains "=" stays whole."""
    if "=" in spec and not Path(spec).exists():
        path, _, name = spec.rpartition("=")
        query = re.split(r"[?&]", path)[-1] if "?" in path else "="
        # In "http://h/metrics?x=1" the "=" belongs to the query, not to a NAME.
        if path and _NAME.match(name) and "/" not in name and "=" in query:
            return path, name
    return spec, None


def stem(path: str) -> str:
    """A deployment name from a path or URL: the file name without .gz/.log/.json/... suffixes."""
    if path == "-":
        return "stdin"
    if "://" in path:
        host = path.split("://", 1)[1].split("/", 1)[0]
        return host.replace(":", "_") or "metrics"
    name = Path(path.rstrip("/")).name or "deployment"
    for _ in range(3):
        head, dot, suffix = name.rpartition(".")
        known = ("gz", "log", "txt", "json", "jsonl", "csv", "prom")
        if dot and head and (suffix.lower() in known or suffix.isdigit()):  # vllm.log.1: rotated
            name = head
    return name


@dataclass
class LoadOptions:
    parse: ParseOptions = field(default_factory=ParseOptions)
    bench_start: datetime | None = None
    scrape_timeout_s: float = SCRAPE_TIMEOUT_S


def _resolve_names(
    logs: list[tuple[str, str | None]],
    others: list[tuple[str, str, str | None]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """Unnamed metrics/bench join the only log deployment; with several, they must be named."""
    named_logs = [(path, name or stem(path)) for path, name in logs]
    log_names = list(dict.fromkeys(name for _, name in named_logs))
    resolved: list[tuple[str, str, str]] = []
    for kind, path, name in others:
        if name is None:
            if len(log_names) > 1:
                raise ConfigError(
                    f"{path}: several deployments ({', '.join(log_names)}); say which this "
                    f"{kind} belongs to with {path}=NAME"
                )
            # Without logs, everything unnamed is one deployment named after the first input.
            name = log_names[0] if log_names else resolved[0][2] if resolved else stem(path)
        resolved.append((kind, path, name))
    return named_logs, resolved


def load_inputs(
    log_specs: Sequence[str],
    metrics_specs: Sequence[str] = (),
    bench_specs: Sequence[str] = (),
    *,
    options: LoadOptions | None = None,
) -> list[DeploymentInputs]:
    """Read everything and group it by deployment (PATH=NAME; default: the log's stem).

    Logs, /metrics snapshots (file, directory or URL) and client results of one deployment are
    joined on time into ONE DeploymentInputs. Raises InputError/ConfigError/ScrapeError.
    """
    opts = options or LoadOptions()
    # A directory is one deployment (its rotated files together), named after the directory.
    specs = []
    for spec in log_specs:
        path, name = split_spec(spec)
        specs.append(f"{path}={stem(path)}" if name is None and Path(path).is_dir() else spec)
    logs = list(iter_log_paths(specs)) if specs else []
    others = [("metrics", *split_spec(s)) for s in metrics_specs]
    others += [("bench", *split_spec(s)) for s in bench_specs]
    named_logs, resolved = _resolve_names(logs, others)
    if not named_logs and not resolved:
        raise ConfigError("nothing to analyze: give log files, --metrics or --bench")

    by_name: dict[str, DeploymentInputs] = {}
    metric_frames: dict[str, list[pl.DataFrame]] = {}
    latency_frames: dict[str, list[pl.DataFrame]] = {}

    def entry(name: str) -> DeploymentInputs:
        return by_name.setdefault(name, DeploymentInputs(name))

    for path, name in named_logs:
        frames = parse_path(path, deployment=name, options=opts.parse)
        target = entry(name)
        target.logs.append(frames)
        target.sources.append(log_summary(frames, name))
    for kind, path, name in resolved:
        target = entry(name)
        if kind == "metrics":
            frame = _read_metrics(path, name, opts)
            metric_frames.setdefault(name, []).append(frame)
            target.sources.append(
                SourceSummary(
                    path=path,
                    kind="metrics",
                    deployment=name,
                    records={
                        "samples": frame.height,
                        "scrapes": frame["timestamp"].n_unique() if frame.height else 0,
                    },
                )
            )
        else:
            result = bench.read_bench(path, deployment=name, start=opts.bench_start)
            if result.latencies.is_empty():
                # Whole-run figures cannot be placed in windows: say so instead of ignoring.
                bench.read_latencies(path, deployment=name, start=opts.bench_start)
            latency_frames.setdefault(name, []).append(result.latencies)
            target.sources.append(
                SourceSummary(
                    path=path,
                    kind="bench",
                    deployment=name,
                    records={"requests": result.latencies.height},
                    notes=list(result.notes),
                )
            )
    for name, parts in metric_frames.items():
        by_name[name].metrics = pl.concat(parts, how="vertical").sort(
            "timestamp", maintain_order=True
        )
    for name, parts in latency_frames.items():
        by_name[name].latencies = pl.concat(parts, how="vertical")
    return list(by_name.values())


def _read_metrics(spec: str, name: str, opts: LoadOptions) -> pl.DataFrame:
    if spec.startswith(("http://", "https://")):
        return metrics.scrape_once(spec, timeout=opts.scrape_timeout_s, deployment=name)
    return metrics.read_metrics_path(spec, deployment=name)


def log_summary(frames: LogFrames, name: str) -> SourceSummary:
    acc = frames.accounting
    return SourceSummary(
        path=frames.source,
        kind="log",
        deployment=name,
        lines=acc.lines,
        unrecognized_lines=acc.unrecognized_lines,
        records=frames.record_counts(),
        vllm_version=frames.vllm_version,
        log_era=frames.log_era,
        timezone=frames.timezone,
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="verdict, evidence and advice for vLLM logs, /metrics and client results",
        description=(
            "Decide whether each deployment is over capacity (KV-cache preemption), show the "
            "evidence per window and the ranked advice. Exit status 0 whatever the verdict, "
            f"unless --fail-on matches ({EXIT_FAIL_ON}); 2 on bad input."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH[=NAME]",
        help="vLLM log files, directories, globs or - (stdin); NAME groups them into a deployment",
    )
    parser.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="PATH|URL[=NAME]",
        help="/metrics snapshot file, directory of snapshots, or a URL scraped once (repeatable)",
    )
    parser.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="FILE[=NAME]",
        help="vllm bench serve --save-detailed JSON, GuideLLM benchmarks.json, CSV/JSONL rows",
    )
    parser.add_argument("--window", default="60s", help="window length (default 60s)")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--html", metavar="FILE", help="also write the HTML report")
    parser.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        help=f"exit {EXIT_FAIL_ON} when a deployment is in this state (at_risk: or worse)",
    )
    parser.add_argument("--year", type=int, help="year of the log's year-less timestamps")
    parser.add_argument("--start", help="ISO time of the log's first record (anchors the year)")
    parser.add_argument("--tz", default="UTC", help="IANA zone of the log's timestamps")
    parser.add_argument("--bench-start", help="ISO time the benchmark started (clock alignment)")
    parser.add_argument(
        "--now", help="ISO time treated as now for recency rules (default: end of the data)"
    )
    parser.add_argument(
        "--whatif-sweep",
        metavar="N,N,...",
        help="with --html: replay each deployment's --bench requests through the scheduler "
        "simulator at these max_num_seqs (plus the current one) and draw the predicted "
        "preemptions and p99 in the capacity figure (off by default: it simulates)",
    )
    parser.add_argument(
        "--whatif-model",
        default=DEFAULT_WHATIF_MODEL,
        help=f"with --whatif-sweep: model preset for step times (default {DEFAULT_WHATIF_MODEL})",
    )
    parser.add_argument(
        "--whatif-gpu",
        default=DEFAULT_WHATIF_GPU,
        help=f"with --whatif-sweep: GPU preset for step times (default {DEFAULT_WHATIF_GPU})",
    )
    parser.set_defaults(func=run)


def fails(report: Report, fail_on: str | None) -> bool:
    if fail_on is None:
        return False
    states = [d.verdict.state for d in report.deployments]
    if fail_on == "insufficient_data":
        return "insufficient_data" in states
    return any(SEVERITY.get(s, -1) >= SEVERITY[fail_on] for s in states)


def write_html(
    report: Report, path: str, *, whatif: dict[str, list[WhatIfOutcome]] | None = None
) -> None:
    """Write the HTML report; `whatif`: per deployment, a max_num_seqs sweep to draw."""
    try:
        # Imported here: the dashboards package is optional for the terminal and JSON report.
        html = importlib.import_module("preemptscope.dashboards.html")
        figures = importlib.import_module("preemptscope.dashboards.figures")
    except ImportError as exc:
        raise PreemptscopeError(
            f"--html needs preemptscope.dashboards.html, which is not available ({exc})"
        ) from None
    curves = {name: figures.whatif_points(outcomes) for name, outcomes in (whatif or {}).items()}
    html.write_report_html(report, path, whatif=curves)


def parse_sweep(text: str) -> list[int]:
    """ "8,16,32,64" -> [8, 16, 32, 64] (each >= 1)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--whatif-sweep {text!r}: expected integers, e.g. 8,16,32,64") from None
    if not values or min(values) < 1:
        raise ConfigError(f"--whatif-sweep {text!r}: expected max_num_seqs values >= 1")
    return sorted(set(values))


def workload_from_latencies(frame: pl.DataFrame) -> Workload | None:
    """The client's requests (REQUEST_LATENCIES) as a replayable workload: arrivals and lengths.

    None when fewer than MIN_WHATIF_REQUESTS rows have a start and both token counts.
    """
    rows = frame.filter(
        pl.col("start").is_not_null()
        & pl.col("prompt_tokens").is_not_null()
        & pl.col("output_tokens").is_not_null()
    ).sort("start")
    if rows.height < MIN_WHATIF_REQUESTS:
        return None
    first = rows["start"].min()
    arrival = (rows["start"] - first).dt.total_microseconds().cast(pl.Float64) / 1e6
    n = rows.height
    return Workload(
        arrival=arrival.to_numpy(),
        prompt_len=rows["prompt_tokens"].clip(lower_bound=1).to_numpy(),
        # Failed requests report 0 output tokens: replayed as 1-token requests.
        output_len=rows["output_tokens"].clip(lower_bound=1).to_numpy(),
        priority=np.zeros(n, dtype=np.int64),
        description={"kind": "client results", "requests": n},
    )


def whatif_sweeps(
    inputs: Sequence[DeploymentInputs],
    report: Report,
    values: Sequence[int],
    *,
    model: str = DEFAULT_WHATIF_MODEL,
    gpu: str = DEFAULT_WHATIF_GPU,
) -> tuple[dict[str, list[WhatIfOutcome]], list[str]]:
    """Per deployment with client results: the max_num_seqs sweep (plus the current value).

    The base configuration is what the report observed (KV blocks, flags: base_from_capacity);
    model and GPU only set the step times. Returns the sweeps and a note per deployment left out.
    """
    by_name: dict[str, DeploymentReport] = {d.name: d for d in report.deployments}
    base = SimConfig(model=model_preset(model), gpu=gpu_preset(gpu))
    sweeps: dict[str, list[WhatIfOutcome]] = {}
    notes: list[str] = []
    for item in inputs:
        dep = by_name.get(item.name)
        if dep is None:
            continue
        workload = workload_from_latencies(item.latencies) if item.latencies is not None else None
        if workload is None:
            notes.append(
                f"what-if: {item.name} has no client results with token counts (--bench), "
                "so no curve"
            )
            continue
        config = base_from_capacity(dep.capacity, base)
        current = dep.capacity.max_num_seqs
        points = sorted({*values, *([current] if current is not None else [])})
        sweeps[item.name] = sweep(workload, "max_num_seqs", points, base=config)
    return sweeps, notes


def build_report(args: argparse.Namespace) -> tuple[list[DeploymentInputs], Report]:
    params = AnalysisParams(
        window_s=parse_duration(args.window),
        now=parse_time(args.now) if args.now else None,
    )
    options = LoadOptions(
        parse=ParseOptions(
            year=args.year,
            start=parse_time(args.start) if args.start else None,
            tz=args.tz,
        ),
        bench_start=parse_time(args.bench_start) if args.bench_start else None,
    )
    inputs = load_inputs(args.paths, args.metrics, args.bench, options=options)
    report = analyze(inputs, params)
    return inputs, dataclasses.replace(report, generated_at=datetime.now(UTC))


def run(args: argparse.Namespace) -> int:
    values = parse_sweep(args.whatif_sweep) if args.whatif_sweep else None
    if values and not args.html:
        raise ConfigError("--whatif-sweep draws in the HTML report: give --html FILE too")
    try:
        inputs, report = build_report(args)
    except ValueError as exc:  # e.g. an invalid --window combination
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise InputError(getattr(exc, "filename", None) or "-", str(exc)) from None
    if args.html:
        sweeps = None
        if values:
            sweeps, notes = whatif_sweeps(
                inputs, report, values, model=args.whatif_model, gpu=args.whatif_gpu
            )
            for note in notes:
                Console(stderr=True).print(note)
        write_html(report, args.html, whatif=sweeps)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_report(report, Console())
        if args.html:
            print(f"HTML report: {args.html}")
    return EXIT_FAIL_ON if fails(report, args.fail_on) else 0
