"""Time analyze() on one simulated hour (log with Preemptions, /metrics every 15 s, client rows).

Run: python bench/analyze_bench.py [--rate 12] [--hours 1]. Prints the sizes and the timings of
parsing (for scale) and of the analysis alone; nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from preemptscope.analysis.analyze import AnalysisParams, analyze
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.workload import synthetic
from preemptscope.analysis.sim.writers import (
    render_bench_result,
    render_log,
    render_metrics_snapshots,
)

from preemptscope.inputs import load_inputs

START = datetime(2026, 11, 20, 10, 0, 0, tzinfo=UTC)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=12.0, help="requests per second")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t = time.perf_counter()
    workload = synthetic(rate=args.rate, duration=args.hours * 3600, seed=1)
    result = simulate(workload, SimConfig(max_num_seqs=256), until=args.hours * 3600)
    print(f"simulated {len(workload):,} requests in {time.perf_counter() - t:.1f} s")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = root / "sim.log"
        log.write_text("\n".join(render_log(result, era="v1-preemptions", start=START)) + "\n")
        snaps = root / "metrics"
        snaps.mkdir()
        for moment, text in render_metrics_snapshots(result, start=START):
            (snaps / f"{moment:%Y%m%dT%H%M%SZ}.prom").write_text(text)
        bench = root / "bench.json"
        bench.write_text(json.dumps(render_bench_result(result, start=START)))

        t = time.perf_counter()
        inputs = load_inputs([str(log)], [str(snaps)], [str(bench)])
        load_s = time.perf_counter() - t
        dep = inputs[0]
        stats = sum(lf["scheduler_stats"].height for lf in dep.logs)
        samples = dep.metrics.height if dep.metrics is not None else 0
        requests = dep.latencies.height if dep.latencies is not None else 0
        print(f"inputs: {stats:,} stats records, {samples:,} metric samples, {requests:,} requests")
        print(f"load (parse log + metrics + bench): {load_s:.2f} s")

        timings = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            report = analyze(inputs, AnalysisParams())
            timings.append(time.perf_counter() - t)
        d = report.deployments[0]
        print(
            f"analyze: best {min(timings):.3f} s, median {sorted(timings)[len(timings) // 2]:.3f} s"
            f" over {args.repeat} runs; {len(d.windows)} windows; verdict {d.verdict.state}; "
            f"preemptions {d.preemptions.total} ({d.preemptions.evidence})"
        )
        logs_only = [type(dep)(dep.name, logs=dep.logs)]
        t = time.perf_counter()
        analyze(logs_only, AnalysisParams())
        print(f"analyze, log only: {time.perf_counter() - t:.3f} s")


if __name__ == "__main__":
    main()
