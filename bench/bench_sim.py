"""Simulator speed: simulated hours per wall-clock second.

Run: python bench/bench_sim.py  (prints a Markdown table for docs/benchmarks.md, "## Simulator")
Timings are wall-clock on whatever machine runs it; compare rows with each other, not across
machines. The core's speed depends on engine steps (not requests), so steps/s is reported too.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.sim import writers
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.workload import synthetic

from preemptscope.cli import main as cli_main

START = datetime(2026, 1, 15, 14, 0, tzinfo=UTC)


def timed(label: str, gpu: str, rate: float, duration: float, record_tokens: bool) -> None:
    workload = synthetic(rate=rate, duration=duration, seed=1)  # prompts ~512, outputs ~256
    config = SimConfig(gpu=GPU_PRESETS[gpu])
    began, cpu = time.perf_counter(), time.process_time()
    result = simulate(workload, config, record_tokens=record_tokens)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    steps = len(result.steps)
    print(
        f"| {label} | {len(workload):,} | {steps:,} | {result.total_preemptions:,} | "
        f"{elapsed:.2f} s | {cpu:.2f} s | {steps / cpu:,.0f} |"
    )


def main() -> int:
    print(f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    print()
    print("| run | requests | engine steps | preemptions | wall time | CPU time | steps/CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    timed("1 h at 20 req/s, Llama-3.1-8B on H100", "H100", 20.0, 3600.0, False)
    timed("same, recording every token (for ITL)", "H100", 20.0, 3600.0, True)
    timed("1 h at 2 req/s on A10G (heavy preemption)", "A10G", 2.0, 3600.0, False)
    timed("10 min at 5 req/s on A100-80G", "A100-80G", 5.0, 600.0, True)

    workload = synthetic(rate=5.0, duration=600.0, seed=1)
    result = simulate(workload, SimConfig(gpu=GPU_PRESETS["A100-80G"]))
    began = time.perf_counter()
    lines = writers.render_log(result, era="v1", start=START)
    snaps = writers.render_metrics_snapshots(result, start=START)
    writers.render_bench_result(result, start=START)
    writers.ground_truth(result, start=START)
    print()
    print(
        f"Rendering 10 min at 5 req/s ({len(lines):,} log lines, {len(snaps)} /metrics "
        f"snapshots, bench JSON, ground truth): {time.perf_counter() - began:.2f} s"
    )
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli_main(["demo", "--out", str(Path(tmp) / "demo"), "--json"])
        demo = time.perf_counter() - began
    print(f"`preemptscope demo` end to end (simulate, write, parse, analyze): {demo:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
