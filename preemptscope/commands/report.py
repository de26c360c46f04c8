"""`preemptscope report`: logs + /metrics + client results in, verdict, evidence and advice out.

`load_inputs` (reusable by the demo and the API) joins everything given for one deployment into
one DeploymentInputs; the analysis itself is preemptscope.analysis.analyze.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from preemptscope import settings
from preemptscope.analysis.analyze import AnalysisParams, DeploymentInputs, analyze
from preemptscope.analysis.kvmodel import gpu_preset, model_preset
from preemptscope.analysis.render import render_report
from preemptscope.analysis.report import DeploymentReport, Report, SourceSummary
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.observed import build_replay, replay_inputs
from preemptscope.analysis.sim.whatif import WhatIfOutcome
from preemptscope.errors import ConfigError, InputError, PreemptscopeError
from preemptscope.ingest.logs import YEAR_RANGE, ParseOptions
from preemptscope.inputs import LoadOptions, load_inputs

# Severity order for --fail-on: "at_risk" also fails on "over_capacity".
SEVERITY = {"ok": 0, "at_risk": 1, "over_capacity": 2}
FAIL_ON = ("over_capacity", "at_risk", "insufficient_data")
EXIT_FAIL_ON = 3


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
    low, high = YEAR_RANGE  # beyond it, shifting by a window or a year overflows datetime
    if not low <= moment.year <= high:
        raise ConfigError(f"bad time {text!r}: expected a year from {low} to {high}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


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
    parser.add_argument(
        "--min-episode",
        default=f"{AnalysisParams.min_episode_s:g}s",
        help="shortest overload that makes a deployment over capacity, measured from its own "
        f"records, not window edges (default {AnalysisParams.min_episode_s:g}s)",
    )
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
        help="with --html: replay each deployment's requests (--bench rows, else the log's) "
        "through the scheduler simulator at these max_num_seqs (plus the current one) and draw "
        "the predicted preemptions and p99 in the capacity figure (off by default: it simulates)",
    )
    parser.add_argument(
        "--whatif-model",
        help="with --whatif-sweep: model preset, only where the data shows nothing",
    )
    parser.add_argument(
        "--whatif-gpu",
        help="with --whatif-sweep: GPU preset, only where the data shows nothing (step times "
        "with no timings to fit)",
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


def whatif_sweeps(
    inputs: Sequence[DeploymentInputs],
    report: Report,
    values: Sequence[int],
    *,
    model: str | None = None,
    gpu: str | None = None,
) -> tuple[dict[str, list[WhatIfOutcome]], list[str]]:
    """Per deployment with request data: the max_num_seqs sweep (plus the current value).

    The replay is the one `whatif` builds (analysis/sim/observed.py): settings as the report
    observed them, the step cost fitted from the data; the presets only fill what is missing.
    Returns the sweeps and a note per deployment left out or assumption made.
    """
    by_name: dict[str, DeploymentReport] = {d.name: d for d in report.deployments}
    base = SimConfig()
    if model:
        base = dataclasses.replace(base, model=model_preset(model))
    if gpu:
        base = dataclasses.replace(base, gpu=gpu_preset(gpu))
    sweeps: dict[str, list[WhatIfOutcome]] = {}
    notes: list[str] = []
    for item in inputs:
        dep = by_name.get(item.name)
        if dep is None:
            continue
        replay = build_replay(
            dep.capacity,
            replay_inputs(item),
            preemptions=dep.preemptions.total,
            base=base,
            presets_given=bool(model or gpu),
        )
        if not replay.replayable:
            notes.append(f"what-if: {item.name} has no request data to replay, so no curve")
            continue
        notes += [f"what-if: {item.name}: assumed {note}" for note in replay.assumptions]
        current = dep.capacity.max_num_seqs
        points = sorted({*values, *([current] if current is not None else [])})
        sweeps[item.name] = [replay.run({"max_num_seqs": v}) for v in points]
    return sweeps, notes


def build_report(args: argparse.Namespace) -> tuple[list[DeploymentInputs], Report]:
    skipped: list[SourceSummary] = []

    def skip(source: SourceSummary) -> None:
        skipped.append(source)
        if args.json:  # the terminal report shows the note under its sources table
            print(f"preemptscope: warning: {source.path}: {source.notes[-1]}", file=sys.stderr)

    params = AnalysisParams(
        window_s=parse_duration(args.window),
        min_episode_s=parse_duration(args.min_episode),
        now=parse_time(args.now) if args.now else None,
    )
    options = LoadOptions(
        parse=ParseOptions(
            year=args.year,
            start=parse_time(args.start) if args.start else None,
            tz=args.tz,
        ),
        bench_start=parse_time(args.bench_start) if args.bench_start else None,
        on_skip=skip,
    )
    inputs = load_inputs(args.paths, args.metrics, args.bench, options=options)
    report = analyze(inputs, params)
    # Inputs that held no vLLM line stay in the sources, each with a note saying why.
    sources = [*report.sources, *skipped]
    return inputs, dataclasses.replace(report, generated_at=datetime.now(UTC), sources=sources)


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
