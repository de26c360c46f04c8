"""Verdict vs the simulator's ground truth over a load sweep, for each log era.

Run: python bench/verdict_sweep.py [--minutes 15] [--rates 1,2,3,4,6,6.5,7,7.5,8,10,14]
Llama-3.1-8B on an A100-80G at gpu_memory_utilization 0.3 (about 59k KV tokens), so that the
KV cache, not max_num_seqs, is the limit. Prints per rate the ground truth, each era's verdict,
and window-level true/false positives; then precision and recall per era.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from preemptscope.analysis.analyze import AnalysisParams, analyze
from preemptscope.analysis.sim import writers
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.workload import synthetic
from preemptscope.ingest.logs import ParseOptions

from preemptscope.inputs import LoadOptions, load_inputs

START = datetime(2026, 11, 20, 10, 0, 0, tzinfo=UTC)
ERAS = ("v1-preemptions", "v1", "v0")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--rates", default="1,2,3,4,6,6.5,7,7.5,8,10,14")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    duration = args.minutes * 60
    # per era: window tp, fp, fn, then deployment tn, fp, fn, tp
    totals = {era: [0] * 7 for era in ERAS}
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (float(r) for r in args.rates.split(",")):
            result = simulate(
                synthetic(rate=rate, duration=duration, seed=args.seed),
                SimConfig(gpu_memory_utilization=0.3),
                until=duration,
            )
            truth = writers.ground_truth(result, start=START)
            by_start = {w["start"]: w for w in truth["windows"]}
            row = [f"rate {rate:>4}: truth {'OVER' if truth['over_capacity'] else 'ok  '}"]
            for era in ERAS:
                log = Path(tmp) / f"{era}-{rate}.log"
                log.write_text("\n".join(writers.render_log(result, era=era, start=START)) + "\n")
                options = LoadOptions(parse=ParseOptions(year=START.year))
                report = analyze(load_inputs([str(log)], options=options), AnalysisParams())
                dep = report.deployments[0]
                t = totals[era]
                for w in dep.windows:
                    gt = by_start.get(w.start.isoformat())
                    if gt is None or not gt["busy"]:
                        continue
                    truly = bool(gt["over_capacity"])
                    t[0] += truly and w.over_capacity
                    t[1] += w.over_capacity and not truly
                    t[2] += truly and not w.over_capacity
                said = dep.verdict.state == "over_capacity"
                t[3 + 2 * bool(truth["over_capacity"]) + said] += 1
                row.append(f"{era} {dep.verdict.state}")
            print(" | ".join(row), flush=True)
    for era, t in totals.items():
        w_tp, w_fp, w_fn, tn, fp, fn, tp = t
        w_prec = w_tp / max(1, w_tp + w_fp)
        w_rec = w_tp / max(1, w_tp + w_fn)
        print(
            f"{era:>15}: deployments tp {tp} fp {fp} fn {fn} tn {tn}; windows precision "
            f"{w_prec:.2f} recall {w_rec:.2f} ({w_tp} tp, {w_fp} fp, {w_fn} fn)"
        )


if __name__ == "__main__":
    main()
