"""Predict every recorded real-scheduler run from ONE observed run per workload, with the CLI
alone (`preemptscope whatif --log --metrics --bench ... --json`), and compare.

    python bench/parity/predict.py RUNS_DIR [--markdown]

RUNS_DIR is what harness.py wrote (WORKLOAD/sK-.../{vllm.log, metrics/, requests.jsonl,
steps.jsonl, run.json}); s0 of each workload is the observed run. Targets (issues 11, 24):
output tok/s within 10 %, e2e p99 within 15 %, preemptions within max(2, 20 %), each priority
class's e2e p99 within 20 % (where the rows carry priorities), and the setting predicted best
is really as good as the best (real p99 within 2 %: closer settings tie). Runs in the
project's own venv; needs no vLLM.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

TOL_TPUT, TOL_P99, TOL_PRE, TOL_CLASS = 0.10, 0.15, 0.20, 0.20


def whatif(observed: Path, changes: dict[str, Any]) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "preemptscope", "whatif",
        "--log", str(observed / "vllm.log"),
        "--metrics", str(observed / "metrics"),
        "--bench", str(observed / "requests.jsonl"),
        "--json",
    ]  # fmt: skip
    flags = {k: v for k, v in changes.items()}
    if not flags:  # the replay of now: change nothing that matters
        flags = {"max_num_seqs": json.loads((observed / "run.json").read_text())["setting"][
            "max_num_seqs"]}  # fmt: skip
    for key, value in flags.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    body: dict[str, Any] = json.loads(out)
    return body


def compare(runs: Path, only: set[str] | None = None) -> list[dict[str, Any]]:
    rows = []
    for wl_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        if only and wl_dir.name not in only:
            continue
        cases = sorted(p for p in wl_dir.iterdir() if (p / "run.json").exists())
        observed = cases[0]
        base = json.loads((observed / "run.json").read_text())["setting"]
        for case in cases:
            meta = json.loads((case / "run.json").read_text())
            setting, truth = meta["setting"], meta["truth"]
            changes: dict[str, Any] = {}
            for key, flag in (
                ("max_num_seqs", "max_num_seqs"),
                ("num_blocks", "num_gpu_blocks_override"),
                ("max_num_batched_tokens", "max_num_batched_tokens"),
                ("prefix_caching", "enable_prefix_caching"),
                ("policy", "scheduling_policy"),
            ):
                if key in setting and setting[key] != base.get(key, setting[key]):
                    value = setting[key]
                    changes[flag] = str(value).lower() if isinstance(value, bool) else value
            body = whatif(observed, changes)
            pred = body["whatif"]["candidate"]
            rows.append(
                {
                    "workload": wl_dir.name,
                    "case": case.name,
                    "changes": changes,
                    "real": truth,
                    "predicted": {
                        "preemptions": pred["preemptions"],
                        "output_throughput": pred["output_throughput"],
                        "e2e_p99": pred["e2e_p99"],
                        "prefix_cache_hit_rate": pred.get("prefix_cache_hit_rate"),
                        "per_priority": pred.get("per_priority") or {},
                    },
                }
            )
    return rows


def verdicts(row: dict[str, Any]) -> dict[str, bool]:
    real, pred = row["real"], row["predicted"]
    out = {
        "tput": abs(pred["output_throughput"] / real["output_throughput"] - 1) <= TOL_TPUT,
        "p99": abs(pred["e2e_p99"] / real["e2e_p99"] - 1) <= TOL_P99,
        "pre": abs(pred["preemptions"] - real["preemptions"])
        <= max(2.0, TOL_PRE * real["preemptions"]),
    }
    classes = real.get("per_priority") or {}
    if classes:
        predicted = pred.get("per_priority") or {}
        out["class"] = all(
            cls in predicted
            and predicted[cls]["e2e_p99"] is not None
            and abs(predicted[cls]["e2e_p99"] / seen["e2e_p99"] - 1) <= TOL_CLASS
            for cls, seen in classes.items()
        )
    return out


def class_text(row: dict[str, Any]) -> str:
    """Each class's e2e p99, real / predicted."""
    real = row["real"].get("per_priority") or {}
    pred = row["predicted"].get("per_priority") or {}
    parts = []
    for cls, seen in real.items():
        mine = pred.get(cls, {}).get("e2e_p99")
        shown = f"{mine:.2f}" if mine is not None else "-"
        parts.append(f"p{cls} {seen['e2e_p99']:.2f} / {shown}")
    return "; ".join(parts) or "-"


TIE = 0.02  # settings whose real p99 differ by less than this are equally good


def best(rows: list[dict[str, Any]]) -> tuple[str, str, bool]:
    """Among the max_num_seqs cases: the real best, the predicted best, and whether the
    predicted pick is really as good (real e2e p99 within TIE of the real best's)."""
    # The observed run and the runs that change max_num_seqs alone.
    seqs = [r for r in rows if set(r["changes"]) <= {"max_num_seqs"}]

    def key(which: str):  # type: ignore[no-untyped-def]
        return lambda r: (r[which]["e2e_p99"], -r[which]["output_throughput"])

    real, pred = min(seqs, key=key("real")), min(seqs, key=key("predicted"))
    good = pred["real"]["e2e_p99"] <= real["real"]["e2e_p99"] * (1 + TIE)
    return str(real["case"]), str(pred["case"]), good


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| workload | run | change from the observed run | preemptions real / predicted | "
        "tok/s real / predicted | e2e p99 real / predicted | per-class e2e p99 real / "
        "predicted (s) | within targets |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        real, pred, ok = r["real"], r["predicted"], verdicts(r)
        change = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "(observed run)"
        marks = " ".join(f"{k}{'✓' if v else '✗'}" for k, v in ok.items())
        out.append(
            f"| {r['workload']} | {r['case'].split('-')[0]} | {change} | "
            f"{real['preemptions']} / {pred['preemptions']} | "
            f"{real['output_throughput']:.0f} / {pred['output_throughput']:.0f} | "
            f"{real['e2e_p99']:.2f} / {pred['e2e_p99']:.2f} s | {class_text(r)} | {marks} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--only", help="these workloads only (comma-separated)")
    args = parser.parse_args()
    rows = compare(Path(args.runs), set(args.only.split(",")) if args.only else None)
    print(table(rows))
    checks = [verdicts(r) for r in rows]
    for key in ("tput", "p99", "pre", "class"):
        judged = [c[key] for c in checks if key in c]
        print(f"{key}: {sum(judged)}/{len(judged)} within target")
    held = [c for r, c in zip(rows, checks, strict=True) if not r["case"].startswith("s0")]
    every = sum(all(c.values()) for c in held)
    print(f"predicted runs within every target: {every}/{len(held)}")
    for wl in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == wl]
        now = next(r for r in mine if r["case"].startswith("s0"))
        ok = all(verdicts(now).values())
        print(f"{wl}: replay of now {'within bounds' if ok else 'OUT of bounds'}", end="; ")
        if any(set(r["changes"]) == {"max_num_seqs"} for r in mine):
            real, pred, good = best(mine)
            verdict = "ok" if good else "WRONG"
            print(f"best max_num_seqs real {real}, predicted {pred}: {verdict}")
        else:
            print("no max_num_seqs cases")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
