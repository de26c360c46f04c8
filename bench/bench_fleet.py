"""Benchmark `report --prometheus` on a simulated fleet held by a real Prometheus.

Builds N servers x D days of S-second scrapes with the scheduler simulator
(tests/fleet/fleetgen.py), backfills them with `promtool tsdb create-blocks-from openmetrics`,
starts Debian's prometheus on 127.0.0.1, and runs `preemptscope report --prometheus URL --json`
in a child process under /usr/bin/time: wall time and peak RSS. Also times one server read and
analyzed in-process (read vs analysis). Figures: docs/benchmarks.md ("Fleet report").
Run from the repository root:
    python bench/bench_fleet.py --servers 1 --days 7 --interval 15
    python bench/bench_fleet.py --servers 10 --days 1 --interval 15
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preemptscope.analysis.analyze import AnalysisParams, analyze_deployment

from preemptscope.fleet import Fleet, FleetOptions
from tests.fleet import fleetgen


def build(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Simulate, write OpenMetrics and backfill into root/tsdb, unless root holds that fleet."""
    key = {"servers": args.servers, "days": args.days, "interval_s": args.interval}
    saved = root / "fleet.json"
    if saved.is_file():
        meta: dict[str, Any] = json.loads(saved.read_text())
        if {k: meta.get(k) for k in key} == key and (root / "tsdb").is_dir():
            return meta
        raise SystemExit(f"{root} holds another fleet ({saved}): give an empty --data")
    root.mkdir(parents=True, exist_ok=True)
    meta = dict(key)
    t = time.perf_counter()
    fleet = fleetgen.build_fleet(servers=args.servers, days=args.days, interval=args.interval)
    meta["simulate_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    fleetgen.write_openmetrics(fleet, root / "history.om")
    meta["openmetrics_s"] = round(time.perf_counter() - t, 1)
    meta["openmetrics_mb"] = round((root / "history.om").stat().st_size / 1e6)
    t = time.perf_counter()
    fleetgen.backfill(root / "history.om", root / "tsdb")
    meta["backfill_s"] = round(time.perf_counter() - t, 1)
    (root / "history.om").unlink()
    scrapes = sum(len(s.rendered) for s in fleet)
    series = sum(1 for line in fleet[0].rendered[0][1].splitlines() if line[:1] not in "#")
    meta["samples"] = scrapes * series
    meta["start"] = min(s.start for s in fleet).isoformat()
    meta["end"] = (
        max(when for s in fleet for when, _ in s.texts) + timedelta(seconds=1)
    ).isoformat()
    saved.write_text(json.dumps(meta, indent=2))
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--interval", type=float, default=15.0, help="scrape interval, s")
    parser.add_argument("--window", default=None, help="--window for report (default: automatic)")
    parser.add_argument(
        "--data", type=Path, default=None,
        help="keep the TSDB here and reuse it when it exists (building it is setup, not measured)",
    )  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="pyinstrument the in-process read")
    parser.add_argument("--build-only", action="store_true", help="build --data and stop")
    args = parser.parse_args()
    out: dict[str, object] = {
        "servers": args.servers, "days": args.days, "interval_s": args.interval,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = args.data or Path(tmp)
        meta = build(root, args)
        out.update(meta)
        if args.build_only:
            print(json.dumps(out, indent=2))
            return 0
        start, end = (datetime.fromisoformat(meta[k]) for k in ("start", "end"))
        with fleetgen.running_prometheus(root / "tsdb", root) as url:
            # One server in-process: reading from Prometheus vs analysing.
            options = FleetOptions(url=url, start=start, end=end, timeout_s=600)
            with Fleet(options) as servers:
                name = next(iter(servers.groups))
                t = time.perf_counter()
                item = servers.read(name)
                out["one_server_read_s"] = round(time.perf_counter() - t, 2)
                out["one_server_rows"] = item.metrics.height if item.metrics is not None else 0
                t = time.perf_counter()
                analyze_deployment(item, AnalysisParams(now=end))
                out["one_server_analyze_s"] = round(time.perf_counter() - t, 2)
            del item
            argv = ["/usr/bin/time", "-v", sys.executable, "-m", "preemptscope.cli", "report",
                    "--prometheus", url, "--start", start.isoformat(), "--end", end.isoformat(),
                    "--window", args.window, "--prometheus-timeout", "600s", "--json"]  # fmt: skip
            t = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            out["report_s"] = round(time.perf_counter() - t, 1)
            if done.returncode != 0:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
            out["report_peak_rss_mb"] = round(int(rss.group(1)) / 1024) if rss else None
            report = json.loads(done.stdout)
            out["deployments"] = len(report["deployments"])
            out["verdicts"] = sorted(d["verdict"]["state"] for d in report["deployments"])
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
