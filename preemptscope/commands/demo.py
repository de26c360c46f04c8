"""`preemptscope demo`: simulate an over-capacity and a healthy deployment, then report on them.

The simulator (preemptscope.analysis.sim) writes the same files a real deployment leaves behind
(server log, /metrics snapshots, `vllm bench serve` JSON) plus its ground truth; then the SAME
pipeline as `preemptscope report` reads them back and prints verdict, evidence and advice.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from preemptscope import jsonout
from preemptscope.analysis.analyze import AnalysisParams, analyze
from preemptscope.analysis.render import render_report
from preemptscope.analysis.report import Report
from preemptscope.analysis.sim import writers
from preemptscope.analysis.sim.engine import SimResult, simulate
from preemptscope.analysis.sim.scenarios import Scenario, demo_scenarios
from preemptscope.analysis.sim.whatif import WhatIfOutcome, sweep
from preemptscope.commands.report import parse_duration, parse_time
from preemptscope.errors import InputError, PreemptscopeError
from preemptscope.ingest.logs import ParseOptions
from preemptscope.inputs import LoadOptions, load_inputs

DEFAULT_OUT = "demo-output"
# Fixed by default so two runs with the same seed write identical files.
DEFAULT_START = "2026-01-15T14:00:00+00:00"
# max_num_seqs values the HTML report's what-if curve replays (plus each deployment's own):
# around the A10G's knee (about 19 requests fit its KV cache at the mean length).
WHATIF_SWEEP = (8, 16, 24, 32, 64)
# The live service follows logs, and stock V1 logs carry no preemption count (the batch report
# takes it from the /metrics snapshots, which the service can only scrape live): with the
# default era its preemption row and scatter would stay empty.
SERVE_ERA: writers.Era = "v1-preemptions"
SERVE_ERA_NOTE = (
    "--serve: logs written as vLLM 0.11.1 with PR #38452 (`Preemptions: N` in the stats line), "
    "so the live page has preemption counts; stock V1 logs carry none: on a real deployment "
    "give `serve` --scrape http://VLLM:8000/metrics too."
)


@dataclass(frozen=True)
class Artefacts:
    name: str
    directory: Path
    log: Path
    metrics_dir: Path
    bench: Path
    ground_truth: Path
    truth: dict[str, Any]


def write_artefacts(
    result: SimResult,
    *,
    name: str,
    out: Path,
    era: str,
    start: datetime,
    metrics_interval: float = 15.0,
    window: float = 60.0,
) -> Artefacts:
    """Render a simulation and write it as a deployment's files under out/name/."""
    directory = out / name
    metrics_dir = directory / "metrics"
    try:
        metrics_dir.mkdir(parents=True, exist_ok=True)
        for stale in metrics_dir.glob("metrics-*.prom"):
            stale.unlink()  # a previous run with other times must not mix in
        log = directory / "vllm.log"
        lines = writers.render_log(result, era=era, start=start)
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
        for when, text in writers.render_metrics_snapshots(
            result, start=start, interval=metrics_interval
        ):
            (metrics_dir / f"metrics-{int(when.timestamp())}.prom").write_text(text)
        bench = directory / "bench.json"
        bench.write_text(writers.dumps(writers.render_bench_result(result, start=start)))
        truth = writers.ground_truth(result, start=start, window=window, label=name)
        ground_truth = directory / "ground-truth.json"
        ground_truth.write_text(writers.dumps(truth))
    except OSError as exc:
        raise InputError(str(exc.filename or out), f"cannot write demo output: {exc}") from None
    return Artefacts(name, directory, log, metrics_dir, bench, ground_truth, truth)


def report_on(artefacts: Sequence[Artefacts], *, window: float, year: int) -> Report:
    """The same loading and analysis as `preemptscope report LOG=NAME --metrics --bench`."""
    logs = [f"{a.log}={a.name}" for a in artefacts]
    metrics = [f"{a.metrics_dir}={a.name}" for a in artefacts]
    benches = [f"{a.bench}={a.name}" for a in artefacts]
    options = LoadOptions(parse=ParseOptions(year=year))
    inputs = load_inputs(logs, metrics, benches, options=options)
    report = analyze(inputs, AnalysisParams(window_s=window))
    return dataclasses.replace(report, generated_at=datetime.now(UTC))


def report_command(artefacts: Sequence[Artefacts]) -> str:
    """The `preemptscope report` command line that reads the demo's files."""
    words = ["preemptscope", "report", *(f"{a.log}={a.name}" for a in artefacts)]
    for a in artefacts:
        words += ["--metrics", f"{a.metrics_dir}={a.name}", "--bench", f"{a.bench}={a.name}"]
    return shlex.join(words)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulate an over-capacity and a healthy vLLM deployment and report on them",
        description=(
            "Simulates two vLLM deployments serving the same traffic (one runs out of KV cache "
            "during a surge), writes their logs, /metrics snapshots, bench JSON and ground "
            "truth, then runs the same analysis as `preemptscope report` on those files."
        ),
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory ({DEFAULT_OUT})")
    parser.add_argument("--json", action="store_true", help="print the report JSON only")
    parser.add_argument("--html", metavar="FILE", help="HTML report path (default OUT/report.html)")
    parser.add_argument("--serve", action="store_true", help="then serve the live service on them")
    parser.add_argument("--port", type=int, help="with --serve: the service's port")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--era",
        choices=writers.ERAS,
        help="log format: v0 (preemption WARNING every 50th), v1 (no preemption lines; the "
        "default), v1-preemptions (`Preemptions: N` in stats; the default with --serve)",
    )
    parser.add_argument("--duration", default="10m", help="simulated traffic (default 10m)")
    parser.add_argument("--window", default="60s", help="analysis window (default 60s)")
    parser.add_argument(
        "--start",
        help=f"ISO time the traffic starts (default {DEFAULT_START}; with --serve, so that the "
        "traffic ends now, which the live service's recent windows need)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    duration = parse_duration(args.duration)
    window = parse_duration(args.window)
    if args.start:
        start = parse_time(args.start)
    elif args.serve:
        now = datetime.now(UTC).replace(microsecond=0)
        start = now - timedelta(seconds=duration + 60)
    else:
        start = parse_time(DEFAULT_START)
    out = Path(args.out)
    err = Console(stderr=True)
    scenarios = demo_scenarios(seed=args.seed, duration=duration)
    if args.serve:  # a bad --port or PREEMPTSCOPE_* fails now, not after the whole demo
        check_serve([s.name for s in scenarios], out=out, port=args.port)
    era = args.era or (SERVE_ERA if args.serve else "v1")
    if args.serve and args.era is None:
        err.print(SERVE_ERA_NOTE, soft_wrap=True, markup=False, highlight=False)
    artefacts = []
    for scenario in scenarios:
        result = simulate(scenario.workload, scenario.config)
        artefacts.append(
            write_artefacts(
                result, name=scenario.name, out=out, era=era, start=start, window=window
            )
        )
    report = report_on(artefacts, window=window, year=start.year)

    html_path = Path(args.html) if args.html else out / "report.html"
    html_note = _write_html(report, html_path, required=bool(args.html), scenarios=scenarios)
    if args.json:
        jsonout.dump(report.to_dict(), sys.stdout)
    else:
        console = Console()
        for scenario in scenarios:
            console.print(f"[bold]{scenario.name}[/bold]: {scenario.summary}")
        render_report(report, console)
        _print_truth(console, report, artefacts)
        console.print(f"Files written under [bold]{out}/[/bold]: " + ", ".join(
            f"{a.name}/{{vllm.log, metrics/, bench.json, ground-truth.json}}" for a in artefacts
        ))  # fmt: skip
        # One unwrapped line (soft_wrap), no markup: pasting it must run the whole command.
        console.print("Re-run the analysis yourself:")
        console.print(report_command(artefacts), soft_wrap=True, markup=False, highlight=False)
    err.print(html_note)
    err.print(f"demo finished in {time.perf_counter() - began:.1f} s")
    if args.serve:
        return _serve(artefacts, err, state_dir=out / "serve-state", port=args.port)
    return 0


def whatif_sweeps(scenarios: Sequence[Scenario]) -> dict[str, list[WhatIfOutcome]]:
    """Per deployment, the same traffic replayed at other max_num_seqs (WHATIF_SWEEP plus the
    current value): the capacity figure's what-if curve."""
    return {
        s.name: sweep(
            s.workload,
            "max_num_seqs",
            sorted({*WHATIF_SWEEP, s.config.max_num_seqs}),
            base=s.config,
        )
        for s in scenarios
    }


def _write_html(
    report: Report, path: Path, *, required: bool, scenarios: Sequence[Scenario] = ()
) -> str:
    try:
        html = importlib.import_module("preemptscope.dashboards.html")
        figures = importlib.import_module("preemptscope.dashboards.figures")
    except ImportError:
        if required:
            raise PreemptscopeError(
                "--html needs preemptscope.dashboards.html, which is not available yet"
            ) from None
        return "HTML report: skipped (the dashboards package has no HTML writer yet)"
    curves = {
        name: figures.whatif_points(outcomes) for name, outcomes in whatif_sweeps(scenarios).items()
    }
    html.write_report_html(report, str(path), whatif=curves)
    return f"HTML report: {path}"


def _print_truth(console: Console, report: Report, artefacts: Sequence[Artefacts]) -> None:
    """Say what the simulator knows, next to what the analysis concluded."""
    verdicts = {d.name: d.verdict.state for d in report.deployments}
    console.print("[bold]Ground truth from the simulator[/bold] (the analysis never reads it):")
    for a in artefacts:
        totals = a.truth["totals"]
        truth = "over capacity" if a.truth["over_capacity"] else "not over capacity"
        console.print(
            f"  {a.name}: {totals['preemptions']} preemptions of {totals['requests']} requests, "
            f"{a.truth['over_capacity_window_fraction']:.0%} of busy windows over capacity "
            f"-> {truth}; report verdict: {verdicts.get(a.name, 'missing')}"
        )


def _serve(
    artefacts: Sequence[Artefacts], err: Console, *, state_dir: Path, port: int | None = None
) -> int:
    """Hand the written logs to `preemptscope serve` (the exporter's entry point)."""
    from preemptscope import cli

    # The logs were just rewritten: offsets checkpointed by an earlier demo would be wrong.
    shutil.rmtree(state_dir, ignore_errors=True)
    argv = serve_argv(artefacts, state_dir=state_dir, port=port)
    err.print(
        "Starting: " + shlex.join(["preemptscope", *argv]),
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    return cli.main(argv)


def check_serve(names: Sequence[str], *, out: Path, port: int | None) -> None:
    """Resolve the settings `_serve` will pass (flags and environment) before simulating."""
    from preemptscope import cli, settings

    planned = []
    for name in names:
        d = out / name
        files = (d / "vllm.log", d / "metrics", d / "bench.json", d / "ground-truth.json")
        planned.append(Artefacts(name, d, *files, truth={}))
    argv = serve_argv(planned, state_dir=out / "serve-state", port=port)
    parser = cli.build_parser("preemptscope.commands.serve")
    settings.resolve(parser.parse_args(argv))


def serve_argv(
    artefacts: Sequence[Artefacts], *, state_dir: Path, port: int | None = None
) -> list[str]:
    """`preemptscope serve` arguments that follow the demo's logs.

    The live service clears an over-capacity verdict `--resolve-after` the last over-capacity
    window (2 min by default, for alerts); the demo's surge ends minutes before "now", so it
    passes the batch report's `stale_after_s` (1 h) and the live verdict matches the report's.
    The demo's logs are finished files, so inputs going quiet is expected: `--ready-after` is
    a day, or /readyz would turn 503 ten minutes in.
    """
    argv = ["serve", "--state-dir", str(state_dir)]
    for a in artefacts:
        argv += ["--log", f"{a.log}={a.name}"]
    argv += ["--resolve-after", f"{AnalysisParams().stale_after_s:g}s", "--ready-after", "1d"]
    if port is not None:
        argv += ["--port", str(port)]
    return argv
