"""Predict every recorded real-scheduler run from ONE observed run per workload, with the CLI
alone (`preemptscope whatif --log --metrics --bench ... --json`), and compare.

    python bench/parity/predict.py RUNS_DIR [--markdown]

RUNS_DIR is what harness.py wrote (WORKLOAD/sK-.../{vllm.log, metrics/, requests.jsonl,
steps.jsonl, run.json}); s0 of each workload is the observed run. Targets (issue 11): output
tok/s within 10 %, e2e p99 within 15 %, preemptions within max(2, 20 %), and the setting
predicted best is really as good as the best (real p99 within 2 %: closer settings tie).
Runs in the project's own venv; needs no vLLM.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

TOL_TPUT, TOL_P99, TOL_PRE = 0.10, 0.15, 0.20


def whatif(observed: Path, changes: dict[str, int]) -> dict[str, Any]:
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


def compare(runs: Path) -> list[dict[str, Any]]:
    rows = []
    for wl_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        cases = sorted(p for p in wl_dir.iterdir() if (p / "run.json").exists())
        observed = cases[0]
        base = json.loads((observed / "run.json").read_text())["setting"]
        for case in cases:
            meta = json.loads((case / "run.json").read_text())
            setting, truth = meta["setting"], meta["truth"]
            changes = {}
            for key, flag in (
                ("max_num_seqs", "max_num_seqs"),
                ("num_blocks", "num_gpu_blocks_override"),
                ("max_num_batched_tokens", "max_num_batched_tokens"),
            ):
                if setting[key] != base[key]:
                    changes[flag] = setting[key]
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
                    },
                }
            )
    return rows


def verdicts(row: dict[str, Any]) -> dict[str, bool]:
    real, pred = row["real"], row["predicted"]
    return {
        "tput": abs(pred["output_throughput"] / real["output_throughput"] - 1) <= TOL_TPUT,
        "p99": abs(pred["e2e_p99"] / real["e2e_p99"] - 1) <= TOL_P99,
        "pre": abs(pred["preemptions"] - real["preemptions"])
        <= max(2.0, TOL_PRE * real["preemptions"]),
    }


TIE = 0.02  # settings whose real p99 differ by less than this are equally good


def best(rows: list[dict[str, Any]]) -> tuple[str, str, bool]:
    """Among the max_num_seqs cases: the real best, the predicted best, and whether the
    predicted pick is really as good (real e2e p99 within TIE of the real best's)."""
    seqs = [r for r in rows if set(r["changes"]) <= {"max_num_seqs"}]

    def key(which: str):  # type: ignore[no-untyped-def]
        return lambda r: (r[which]["e2e_p99"], -r[which]["output_throughput"])

    real, pred = min(seqs, key=key("real")), min(seqs, key=key("predicted"))
    good = pred["real"]["e2e_p99"] <= real["real"]["e2e_p99"] * (1 + TIE)
    return str(real["case"]), str(pred["case"]), good


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| workload | run | change from the observed run | preemptions real / predicted | "
        "tok/s real / predicted | e2e p99 real / predicted | within targets |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        real, pred, ok = r["real"], r["predicted"], verdicts(r)
        change = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "(observed run)"
        marks = " ".join(f"{k}{'✓' if v else '✗'}" for k, v in ok.items())
        out.append(
            f"| {r['workload']} | {r['case'].split('-')[0]} | {change} | "
            f"{real['preemptions']} / {pred['preemptions']} | "
            f"{real['output_throughput']:.0f} / {pred['output_throughput']:.0f} | "
            f"{real['e2e_p99']:.2f} / {pred['e2e_p99']:.2f} s | {marks} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    rows = compare(Path(args.runs))
    print(table(rows))
    checks = [verdicts(r) for r in rows]
    for key in ("tput", "p99", "pre"):
        print(f"{key}: {sum(c[key] for c in checks)}/{len(checks)} within target")
    for wl in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == wl]
        real, pred, good = best(mine)
        print(f"{wl}: best max_num_seqs real {real}, predicted {pred}: {'ok' if good else 'WRONG'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
