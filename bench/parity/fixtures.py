"""Copy chosen recorded runs into tests/fixtures/parity, small enough for CI.

    python bench/parity/fixtures.py RUNS_DIR [--only WORKLOAD,...]

Per run: run.json (the true totals), requests.jsonl (client rows), vllm.log (startup and stats
lines; gzipped, vllm.log.gz, past LOG_GZIP_BYTES: a log that prints every prompt's token ids),
steps.jsonl.gz, and the first and last /metrics scrapes with the families the replay
reads (the preemption and prefix-cache counters, running/waiting, KV usage): counters over
the run are the last value less the first, so the scrapes between add nothing to it.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "parity"
# (workload, runs): the observed run s0 first. Which runs: docs/simulator.md, "Parity".
CHOSEN = {
    "bursts": None,  # None: already checked in (the first round's runs)
    "long-prompts": None,
    "poisson": None,
    "prefix512": ("s0", "s1", "s5"),
    "prefix1024": ("s0", "s2", "s4"),
    "priority-mix": ("s0", "s1", "s5"),
    "slot-bound": ("s0", "s3"),
    "budget-bound": ("s0", "s2"),
    "nested": ("s0", "s2", "s4"),
}
LOG_GZIP_BYTES = 1 << 20  # the CLI reads a .gz log as it is
FAMILIES = (
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)


def _families(text: str) -> str:
    """The exposition lines (HELP, TYPE, samples) of FAMILIES only."""
    keep = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("# ") and len(line.split()) > 2 else line
        if any(name == f or name.startswith(f + "{") or name.startswith(f + " ") for f in FAMILIES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def copy_run(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "metrics").mkdir(parents=True)
    for name in ("run.json", "requests.jsonl"):
        shutil.copy(src / name, dst / name)
    log = src / "vllm.log"
    if log.stat().st_size > LOG_GZIP_BYTES:
        # mtime 0: the same run gives the same bytes.
        (dst / "vllm.log.gz").write_bytes(gzip.compress(log.read_bytes(), mtime=0))
    else:
        shutil.copy(log, dst / "vllm.log")
    with (src / "steps.jsonl").open("rb") as f_in, gzip.open(dst / "steps.jsonl.gz", "wb") as out:
        shutil.copyfileobj(f_in, out)
    scrapes = sorted((src / "metrics").iterdir())
    for scrape in (scrapes[0], scrapes[-1]):
        (dst / "metrics" / scrape.name).write_text(_families(scrape.read_text()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs")
    parser.add_argument("--only", help="these workloads only (comma-separated)")
    args = parser.parse_args()
    runs = Path(args.runs)
    only = set(args.only.split(",")) if args.only else None
    for workload, chosen in CHOSEN.items():
        if chosen is None or (only and workload not in only):
            continue
        for prefix in chosen:
            (src,) = (p for p in (runs / workload).iterdir() if p.name.split("-")[0] == prefix)
            copy_run(src, FIXTURES / workload / src.name)
            print(workload, src.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
