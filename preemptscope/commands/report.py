"""`preemptscope report`: logs + /metrics + client results in, verdict, evidence and advice out.

`load_inputs` (reusable by the demo and the API) joins everything given for one deployment into
one DeploymentInputs; the analysis itself is preemptscope.analysis.analyze.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from preemptscope import jsonout, settings
from preemptscope.analysis.analyze import (
    AnalysisParams,
    DeploymentInputs,
    analyze_deployment,
    summarise_groups,
)
from preemptscope.analysis.kvmodel import gpu_preset, model_preset
from preemptscope.analysis.render import render_report
from preemptscope.analysis.report import DeploymentReport, Report, SourceSummary
from preemptscope.analysis.sim.closedloop import ClosedLoop, closed_loop
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.observed import build_replay, hit_rate_note, replay_inputs
from preemptscope.analysis.sim.whatif import WhatIfOutcome
from preemptscope.errors import ConfigError, InputError, PreemptscopeError
from preemptscope.fleet import (
    Fleet,
    FleetOptions,
    fleet_assumptions,
    fleet_html,
    fleet_rows,
    fleet_table,
)
from preemptscope.ingest.archive import is_archive
from preemptscope.ingest.logs import ParseOptions
from preemptscope.ingest.promapi import PromAuth
from preemptscope.ingest.schema import YEAR_RANGE
from preemptscope.inputs import LoadOptions, iter_inputs, split_spec

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
        help="vLLM log files, directories, globs or - (stdin), or a Parquet archive written by "
        "parse --out; NAME groups them into a deployment (of an archive: reads only NAME)",
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
    add_prometheus_args(parser)
    parser.add_argument(
        "--window",
        help="window length (default 60s; with --prometheus chosen from the range: 1m up to "
        "a day, 5m up to 5 days, 15m up to 15 days, 1h up to 60 days, then longer)",
    )
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
    parser.add_argument(
        "--start",
        help="ISO time of the log's first record (anchors the year); with --prometheus, the "
        "start of the range read",
    )
    parser.add_argument("--tz", default="UTC", help="IANA zone of the log's timestamps")
    parser.add_argument("--bench-start", help="ISO time the benchmark started (clock alignment)")
    parser.add_argument(
        "--now", help="ISO time treated as now for recency rules (default: end of the data)"
    )
    parser.add_argument(
        "--whatif-sweep",
        metavar="N,N,...",
        help="with --html or --json: replay each deployment's requests (--bench rows, else the "
        "log's) through the scheduler simulator at these max_num_seqs (plus the current one), "
        "calibrated as the advice is; draw the predicted preemptions and p99 in the capacity "
        "figure, print them in the JSON's whatif_sweep (off by default: it simulates)",
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


def add_prometheus_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fleet history from Prometheus (or Thanos, Mimir, ...)")
    group.add_argument(
        "--prometheus",
        metavar="URL",
        help="read every vLLM server's history from this Prometheus HTTP API base URL",
    )
    group.add_argument(
        "--end",
        help="with --prometheus: ISO end of the range (default: now); with a Parquet archive "
        "(parse --out DIR), the end of the time read from it",
    )
    group.add_argument(
        "--since",
        metavar="DURATION",
        help="with --prometheus: the range is this long, ending at --end (default 1h)",
    )
    group.add_argument(
        "--selector",
        metavar="'{label=\"value\",...}'",
        help="label matchers added to every query, e.g. '{namespace=\"llm\"}'",
    )
    group.add_argument(
        "--group-by",
        metavar="LABEL,...",
        help="one deployment per value of these labels (replicas together), "
        "e.g. namespace,model_name",
    )
    group.add_argument("--prometheus-token", metavar="TOKEN", help="bearer token")
    group.add_argument("--prometheus-token-file", metavar="FILE", help="bearer token from a file")
    group.add_argument("--prometheus-user", metavar="USER", help="basic auth user")
    group.add_argument(
        "--prometheus-password-file", metavar="FILE", help="basic auth password from a file"
    )
    group.add_argument("--prometheus-ca-file", metavar="FILE", help="CA bundle (PEM) for https")
    group.add_argument(
        "--prometheus-timeout",
        default="60s",
        metavar="DURATION",
        help="total time allowed for each API request (default 60s)",
    )


def fleet_options(args: argparse.Namespace) -> FleetOptions | None:
    """The --prometheus flags as FleetOptions; None without --prometheus."""
    fleet_only = ("since", "selector", "group_by", "prometheus_token",
                  "prometheus_token_file", "prometheus_user", "prometheus_password_file",
                  "prometheus_ca_file")  # fmt: skip
    if not args.prometheus:
        given = [name for name in fleet_only if getattr(args, name, None)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ConfigError(f"{flag} reads from Prometheus: give --prometheus URL too")
        return None
    if args.prometheus_token and args.prometheus_token_file:
        raise ConfigError("give --prometheus-token or --prometheus-token-file, not both")
    if (args.prometheus_token or args.prometheus_token_file) and args.prometheus_user:
        raise ConfigError("give a bearer token or basic auth (--prometheus-user), not both")
    if args.since and args.start:
        raise ConfigError("give --start or --since, not both")
    end = parse_time(args.end) if args.end else datetime.now(UTC)
    start = (
        parse_time(args.start)
        if args.start
        else end - timedelta(seconds=parse_duration(args.since or "1h"))
    )
    token = args.prometheus_token
    if args.prometheus_token_file:
        token = settings.read_secret(args.prometheus_token_file, "--prometheus-token-file")
    password = None
    if args.prometheus_password_file:
        if not args.prometheus_user:
            raise ConfigError("--prometheus-password-file needs --prometheus-user")
        password = settings.read_secret(args.prometheus_password_file, "--prometheus-password-file")
    group_by = tuple(x.strip() for x in (args.group_by or "").split(",") if x.strip())
    return FleetOptions(
        url=args.prometheus,
        start=start,
        end=end,
        selector=args.selector,
        group_by=group_by,
        auth=PromAuth(
            token=token,
            username=args.prometheus_user,
            password=password,
            ca_file=args.prometheus_ca_file,
        ),
        timeout_s=parse_duration(args.prometheus_timeout),
        window_s=parse_duration(args.window) if args.window else None,
    )


def fails(report: Report, fail_on: str | None) -> bool:
    if fail_on is None:
        return False
    states = [d.verdict.state for d in report.deployments]
    if fail_on == "insufficient_data":
        return "insufficient_data" in states
    return any(SEVERITY.get(s, -1) >= SEVERITY[fail_on] for s in states)


def write_html(
    report: Report,
    path: str,
    *,
    whatif: dict[str, Sweep] | None = None,
    overview: str | None = None,
) -> None:
    """Write the HTML report; `whatif`: per deployment, a max_num_seqs sweep to draw with its
    calibration label and per-class figures; `overview`: an HTML section for the top."""
    try:
        # Imported here: the dashboards package is optional for the terminal and JSON report.
        html = importlib.import_module("preemptscope.dashboards.html")
        figures = importlib.import_module("preemptscope.dashboards.figures")
    except ImportError as exc:
        raise PreemptscopeError(
            f"--html needs preemptscope.dashboards.html, which is not available ({exc})"
        ) from None
    sweeps = whatif or {}
    curves = {name: figures.whatif_points(s.outcomes) for name, s in sweeps.items()}
    details = {name: s.view() for name, s in sweeps.items()}
    html.write_report_html(report, path, whatif=curves, sweeps=details, overview=overview or "")


def parse_sweep(text: str) -> list[int]:
    """ "8,16,32,64" -> [8, 16, 32, 64] (each >= 1)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--whatif-sweep {text!r}: expected integers, e.g. 8,16,32,64") from None
    if not values or min(values) < 1:
        raise ConfigError(f"--whatif-sweep {text!r}: expected max_num_seqs values >= 1")
    return sorted(set(values))


@dataclass(frozen=True)
class Sweep:
    """One deployment's max_num_seqs sweep, replayed with the closed loop's step cost."""

    outcomes: list[WhatIfOutcome]
    loop: ClosedLoop  # the calibration: its replay of now and residual against the data
    current: int | None  # the replay's current max_num_seqs

    def to_dict(self) -> dict[str, Any]:
        """The sweep as `report --json` prints it (`whatif_sweep.<deployment>`); the HTML
        is drawn from these values (`view`)."""
        residual = self.loop.residual
        label = residual.describe()
        sharing = hit_rate_note(self.loop.replay, self.loop.now)
        return {
            "label": label[0].upper() + label[1:],
            "verified": residual.verified,
            "fidelity": residual.to_dict(),
            "calibration": self.loop.method(),
            "prefix_sharing": sharing[0].upper() + sharing[1:] if sharing else None,
            "current_max_num_seqs": self.current,
            "observed_per_priority": self.loop.replay.observed.per_priority,
            "points": [
                {
                    "max_num_seqs": o.settings["max_num_seqs"],
                    "preemptions": o.preemptions,
                    "output_throughput": o.output_throughput,
                    "e2e_p99": o.e2e_p99,
                    "ttft_p99": o.ttft_p99,
                    "per_priority": o.per_priority,
                }
                for o in self.outcomes
            ],
        }

    def view(self) -> dict[str, Any]:
        """What the HTML shows beside the curve, from to_dict's values: the label (fidelity's
        words, as the advice and `whatif` say it), the calibration, the prefix-cache hit rate,
        and per class each setting's figures."""
        body = self.to_dict()
        rows: list[tuple[str, dict[str, dict[str, float | int | None]]]] = []
        if body["observed_per_priority"]:
            rows.append(("observed", body["observed_per_priority"]))
        for point in body["points"]:
            if point["per_priority"]:
                seqs = point["max_num_seqs"]
                tag = " (now)" if seqs == body["current_max_num_seqs"] else ""
                rows.append((f"max_num_seqs {seqs}{tag}", point["per_priority"]))
        return {
            "label": body["label"],
            "verified": body["verified"],
            "calibration": body["calibration"],
            "sharing": body["prefix_sharing"],
            "classes": rows,
        }


def whatif_sweep(
    item: DeploymentInputs,
    dep: DeploymentReport,
    values: Sequence[int],
    *,
    model: str | None = None,
    gpu: str | None = None,
) -> tuple[Sweep | None, list[str]]:
    """The deployment's max_num_seqs sweep (plus the current value), or None with a note.

    Called while the deployment's inputs are whole (its /metrics too): the replay is the one
    the advice explores (observed settings, an inferred cap as the current max_num_seqs),
    calibrated by the same closed loop (closedloop.py), whose residual labels the curve as
    fidelity.py labels every prediction. The presets only fill what the data does not show.
    """
    base = SimConfig()
    if model:
        base = dataclasses.replace(base, model=model_preset(model))
    if gpu:
        base = dataclasses.replace(base, gpu=gpu_preset(gpu))
    finding = dep.verdict.limit_detail
    inferred = (
        finding.max_num_seqs
        if finding is not None and finding.max_num_seqs_source == "inferred"
        else None
    )
    replay = build_replay(
        dep.capacity,
        replay_inputs(item),
        preemptions=dep.preemptions.total,
        base=base,
        current={"max_num_seqs": inferred} if inferred else None,
        presets_given=bool(model or gpu),
    )
    if not replay.replayable:
        return None, [f"what-if: {item.name} has no request data to replay, so no curve"]
    loop = closed_loop(replay)
    notes = [f"what-if: {item.name}: assumed {note}" for note in loop.replay.assumptions]
    if (sharing := hit_rate_note(loop.replay, loop.now)) is not None:
        notes.append(f"what-if: {item.name}: {sharing}")
    current = loop.replay.config.max_num_seqs
    points = sorted({*values, current})
    outcomes = [loop.replay.run({"max_num_seqs": v}) for v in points]
    return Sweep(outcomes, loop, current), notes


@dataclass
class Built:
    inputs: list[DeploymentInputs]
    report: Report
    fleet: dict[str, Any] | None = None  # the JSON `fleet` object with --prometheus
    sweeps: dict[str, Sweep] = field(default_factory=dict)  # --whatif-sweep, per deployment
    sweep_notes: list[str] = field(default_factory=list)


def build_report(args: argparse.Namespace) -> tuple[list[DeploymentInputs], Report]:
    built = build(args)
    return built.inputs, built.report


def build(args: argparse.Namespace, sweep: Sequence[int] | None = None) -> Built:
    """Read and analyze every deployment; with `sweep`, also replay each one's max_num_seqs
    sweep while its inputs are whole."""
    skipped: list[SourceSummary] = []

    def skip(source: SourceSummary) -> None:
        skipped.append(source)
        if args.json:  # the terminal report shows the note under its sources table
            print(f"preemptscope: warning: {source.path}: {source.notes[-1]}", file=sys.stderr)

    fleet = fleet_options(args)
    # A fleet's verdicts are as of the end of the range asked for, not of each server's data.
    now = parse_time(args.now) if args.now else fleet.end if fleet is not None else None
    params = AnalysisParams(
        # With --prometheus the window is the one the servers were reduced with.
        window_s=fleet.window if fleet is not None else parse_duration(args.window or "60s"),
        min_episode_s=parse_duration(args.min_episode),
        now=now,
    )
    options = LoadOptions(
        parse=ParseOptions(
            year=args.year,
            # With --prometheus, --start is the range's start, not the log's first record.
            start=parse_time(args.start) if args.start and fleet is None else None,
            tz=args.tz,
        ),
        bench_start=parse_time(args.bench_start) if args.bench_start else None,
        # Without --prometheus, --start/--end also select the time range of Parquet archives.
        archive_start=parse_time(args.start) if args.start and fleet is None else None,
        archive_end=parse_time(args.end) if args.end and fleet is None else None,
        on_skip=skip,
    )
    if args.end and fleet is None and not any(is_archive(split_spec(p)[0]) for p in args.paths):
        raise ConfigError("--end ends the range read from --prometheus or a Parquet archive")
    inputs: list[DeploymentInputs] = []
    deployments: list[DeploymentReport] = []
    sweeps: dict[str, Sweep] = {}
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(Fleet(fleet)) if fleet is not None else None
        items = iter_inputs(args.paths, args.metrics, args.bench, options=options, fleet=servers)
        for item in items:
            deployments.append(analyze_deployment(item, params))
            if sweep:
                found, said = whatif_sweep(
                    item, deployments[-1], sweep, model=args.whatif_model, gpu=args.whatif_gpu
                )
                notes += said
                if found is not None:
                    sweeps[item.name] = found
            # Analyzed one at a time: dropped before the next is read, so a fleet's samples
            # never sit in memory together (logs and client results are kept: small).
            item.metrics = None
            inputs.append(item)
    report = Report(
        deployments=deployments,
        # Inputs that held no vLLM line stay in the sources, each with a note saying why.
        sources=[*(source for item in inputs for source in item.sources), *skipped],
        parameters=params.to_dict(),
        groups=summarise_groups(deployments),
    )
    report = dataclasses.replace(report, generated_at=datetime.now(UTC))
    summary = None
    if fleet is not None and servers is not None:
        summary = {
            "prometheus": fleet.url,
            "start": fleet.start.isoformat(),
            "end": fleet.end.isoformat(),
            "selector": fleet.selector,
            "group_by": list(fleet.group_by),
            "servers": fleet_rows(report, servers.groups),
            "window_s": fleet.window,
            "window_automatic": fleet.window_s is None,
            "assumptions": fleet_assumptions(fleet),
        }
    return Built(inputs, report, summary, sweeps, notes)


def _fleet_title(summary: dict[str, Any]) -> str:
    rows = summary["servers"]
    over = sum(1 for r in rows if r["verdict"] == "over_capacity")
    risk = sum(1 for r in rows if r["verdict"] == "at_risk")
    return (
        f"Fleet: {len(rows)} deployment{'s' if len(rows) != 1 else ''} from "
        f"{summary['prometheus']}, {summary['start'][:16]} to {summary['end'][:16]} UTC "
        f"({over} over capacity, {risk} at risk)"
    )


def run(args: argparse.Namespace) -> int:
    values = parse_sweep(args.whatif_sweep) if args.whatif_sweep else None
    if values and not (args.html or args.json):
        raise ConfigError(
            "--whatif-sweep draws in the HTML report or prints in the JSON: give --html FILE "
            "or --json"
        )
    try:
        built = build(args, values)
        report = built.report
    except ValueError as exc:  # e.g. an invalid --window combination
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise InputError(getattr(exc, "filename", None) or "-", str(exc)) from None
    for note in built.sweep_notes:
        Console(stderr=True).print(note)
    if args.html:
        overview = None
        if built.fleet is not None:
            overview = fleet_html(built.fleet["servers"], _fleet_title(built.fleet))
        write_html(report, args.html, whatif=built.sweeps, overview=overview)
    if args.json:
        out = report.to_dict()
        if built.fleet is not None:
            out["fleet"] = built.fleet
        if values:
            out["whatif_sweep"] = {name: sweep.to_dict() for name, sweep in built.sweeps.items()}
        jsonout.dump(out, sys.stdout)
    else:
        console = Console()
        if built.fleet is not None:
            console.print(fleet_table(built.fleet["servers"], _fleet_title(built.fleet)))
            for note in built.fleet["assumptions"]:
                console.print(f"assumed: {note}")
        render_report(report, console)
        if args.html:
            print(f"HTML report: {args.html}")
    return EXIT_FAIL_ON if fails(report, args.fail_on) else 0
