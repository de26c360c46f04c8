"""The limit and the advice on a sweep of real-scheduler runs, and whether following it helped.

Every run the parity harness recorded (bench/parity/harness.py: vLLM 0.33.0's own V1 scheduler
on CPU, its stats lines, /metrics and client rows) is analysed as a user would give it. For the
first suggestion, the recorded run of the same traffic at the suggested setting (or the nearest
recorded one in the suggested direction, every other setting equal) says what following it
really did: e2e p99 and output tok/s, real against predicted.

    python bench/bench_limits.py [RUNS_DIR] [--json]       # RUNS_DIR: /work/parity-runs
    python bench/bench_limits.py --cut RUN OUT             # a test fixture (tests/fixtures/limits)

Not a test: it reads recorded runs and prints figures (docs/report.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preemptscope.analysis.advice import SAME
from preemptscope.analysis.analyze import AnalysisParams, analyze
from preemptscope.analysis.report import Advice, DeploymentReport

from preemptscope.inputs import LoadOptions, load_inputs

# The /metrics families the limit analysis reads (a fixture keeps these, values untouched).
KEEP = re.compile(
    r"^(# (HELP|TYPE) )?vllm:(num_preemptions_total|num_requests_running|num_requests_waiting|"
    r"num_requests_waiting_by_reason|kv_cache_usage_perc|iteration_tokens_total|"
    r"prompt_tokens_total|generation_tokens_total|cache_config_info|"
    r"e2e_request_latency_seconds)(_bucket|_sum|_count)?[ {]"
)
# Which recorded setting a suggestion moves: (setting key, +1 up / -1 down). More GPU memory
# for the KV cache is more KV blocks at the same everything else.
MOVES = {
    "raise_max_num_seqs": ("max_num_seqs", 1),
    "lower_max_num_seqs": ("max_num_seqs", -1),
    "raise_max_num_batched_tokens": ("max_num_batched_tokens", 1),
    "lower_max_num_batched_tokens": ("max_num_batched_tokens", -1),
    "raise_gpu_memory_utilization": ("num_blocks", 1),
    "lower_gpu_memory_utilization": ("num_blocks", -1),
}


@dataclass(frozen=True)
class Run:
    path: Path
    group: str
    setting: dict[str, Any]
    truth: dict[str, Any]


def runs(root: Path) -> list[Run]:
    found = []
    for meta in sorted(root.glob("*/*/run.json")):
        data = json.loads(meta.read_text())
        found.append(Run(meta.parent, meta.parent.parent.name, data["setting"], data["truth"]))
    return found


def report(run: Path) -> DeploymentReport:
    inputs = load_inputs(
        [f"{run}/vllm.log=d"],
        [f"{run}/metrics=d"],
        [f"{run}/requests.jsonl=d"],
        options=LoadOptions(),
    )
    (dep,) = analyze(inputs, AnalysisParams()).deployments
    return dep


def followed(run: Run, advice: Advice, pool: list[Run]) -> tuple[Run, str] | None:
    """The recorded run of the same traffic with the advice followed: the suggested value, else
    the nearest recorded one in its direction (everything else equal)."""
    move = MOVES.get(advice.action)
    if move is None:
        return None
    key, sign = move
    now = run.setting[key]
    same = [
        r
        for r in pool
        if r.group == run.group
        and r is not run
        and all(r.setting[k] == v for k, v in run.setting.items() if k != key)
        and (r.setting[key] - now) * sign > 0
    ]
    if not same:
        return None
    try:
        target = float((advice.suggested or "").split()[0])
    except ValueError:
        target = None
    if key == "num_blocks" or target is None:
        chosen = min(same, key=lambda r: abs(r.setting[key] - now))
        return chosen, f"{key} {now} -> {chosen.setting[key]} (nearest recorded)"
    chosen = min(same, key=lambda r: abs(r.setting[key] - target))
    exact = "exact" if chosen.setting[key] == target else "nearest recorded"
    return chosen, f"{key} {now} -> {chosen.setting[key]} ({exact})"


def change(new: float, old: float) -> float:
    return new / old - 1.0


def helped(p99: float, tput: float, fewer_preemptions: bool) -> bool:
    """The advice engine's rule (analysis/advice.py helps) on the real figures."""
    if (p99 < -SAME and tput >= -SAME) or (tput > SAME and p99 <= SAME):
        return True
    return abs(p99) <= SAME and abs(tput) <= SAME and fewer_preemptions


def evaluate(root: Path) -> list[dict[str, Any]]:
    pool = runs(root)
    rows = []
    for run in pool:
        start = time.perf_counter()
        dep = report(run.path)
        seconds = time.perf_counter() - start
        v = dep.verdict
        first = dep.advice[0] if dep.advice else None
        row: dict[str, Any] = {
            "run": f"{run.group}/{run.path.name}",
            "state": v.state,
            "limit": v.limit,
            "also": v.limit_detail.also if v.limit_detail else [],
            "analysis_s": round(seconds, 2),
            "first": None,
        }
        if first is not None:
            row["first"] = {
                "action": first.action,
                "suggested": first.suggested,
                "verified": first.verified,
                "predicted": first.predicted,
            }
            match = followed(run, first, pool)
            if match is not None:
                other, how = match
                p99 = change(other.truth["e2e_p99"], run.truth["e2e_p99"])
                tput = change(other.truth["output_throughput"], run.truth["output_throughput"])
                row["real"] = {
                    "compared_with": f"{other.group}/{other.path.name}",
                    "how": how,
                    "e2e_p99_change": round(p99, 3),
                    "tok_s_change": round(tput, 3),
                    "preemptions": f"{run.truth['preemptions']} -> {other.truth['preemptions']}",
                    "helped": helped(
                        p99, tput, other.truth["preemptions"] < run.truth["preemptions"]
                    ),
                }
                if first.predicted is not None:
                    now, new = first.predicted["now"], first.predicted["with_change"]
                    if now["e2e_p99"] and new["e2e_p99"]:
                        row["real"]["predicted_e2e_p99_change"] = round(
                            change(float(new["e2e_p99"]), float(now["e2e_p99"])), 3
                        )
        rows.append(row)
    return rows


def cut(src: Path, dst: Path) -> None:
    """A small fixture of one run: its log, client rows, run.json and the /metrics families
    the limit analysis reads."""
    (dst / "metrics").mkdir(parents=True, exist_ok=True)
    for name in ("vllm.log", "requests.jsonl", "run.json"):
        shutil.copy(src / name, dst / name)
    for prom in sorted((src / "metrics").glob("*.prom")):
        lines = [line for line in prom.read_text().splitlines() if KEEP.match(line)]
        (dst / "metrics" / prom.name).write_text("\n".join(lines) + "\n")


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.0f} %"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="/work/parity-runs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cut", nargs=2, metavar=("RUN", "OUT"))
    args = parser.parse_args()
    if args.cut:
        cut(Path(args.cut[0]), Path(args.cut[1]))
        return 0
    rows = evaluate(Path(args.root))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| run | state | limit | first suggestion | verified | compared with | "
          "real p99 | predicted p99 | real tok/s | helped |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        first = row["first"]
        real = row.get("real")
        limit = row["limit"] + (f" (+{', '.join(row['also'])})" if row["also"] else "")
        suggestion = f"{first['action']} {first['suggested']}" if first else "-"
        print(
            f"| {row['run']} | {row['state']} | {limit} | {suggestion} | "
            f"{first['verified'] if first else '-'} | {real['how'] if real else '-'} | "
            f"{pct(real['e2e_p99_change']) if real else '-'} | "
            f"{pct(real.get('predicted_e2e_p99_change')) if real else '-'} | "
            f"{pct(real['tok_s_change']) if real else '-'} | "
            f"{real['helped'] if real else '-'} |"
        )
    compared = [r["real"] for r in rows if r.get("real")]
    advised = [r for r in rows if r["first"]]
    print(
        f"\n{len(rows)} runs; {len(advised)} with advice; {len(compared)} first suggestions "
        f"with a recorded run to compare; following it helped in "
        f"{sum(1 for c in compared if c['helped'])}; real e2e p99 lower in "
        f"{sum(1 for c in compared if c['e2e_p99_change'] < 0)}; verified in "
        f"{sum(1 for r in advised if r['first']['verified'])} of {len(advised)}; "
        f"analysis {sum(r['analysis_s'] for r in rows):.0f} s in all",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
