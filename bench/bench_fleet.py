"""Benchmark `report --prometheus` on a simulated fleet held by a real Prometheus.

Builds N servers x D days of S-second scrapes with the scheduler simulator
(tests/fleet/fleetgen.py), backfills them with `promtool tsdb create-blocks-from openmetrics`,
starts Debian's prometheus on 127.0.0.1, and runs `preemptscope report --prometheus URL --json`
in a child process: wall time and peak RSS (os.wait4's rusage). Building the data is setup,
not measured; `--data DIR` keeps it for the next run. `--profile` first runs the same report
in-process under pyinstrument. `--terminal --since 7d` times the command the issue names
(`report --prometheus URL --since 7d --end END`, the terminal report); `--compare REF` runs the
same report of git ref REF too, alternately (`--repeat` pairs), for a ratio on a noisy machine.
Figures: docs/benchmarks.md ("Fleet report from Prometheus"). Run from the repository root:
    python bench/bench_fleet.py --servers 10 --days 1 --data /tmp/f10x1
    python bench/bench_fleet.py --servers 100 --days 7 --seeds 1 --batch 10 --data /tmp/f100x7
    python bench/bench_fleet.py --servers 100 --days 7 --seeds 1 --data /tmp/f100x7 \
        --terminal --since 7d --compare HEAD~3 --repeat 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# A sibling in bench/ (not a package): mypy cannot follow it.
from bench_parse import _cli, checkout  # type: ignore[import-not-found]

from preemptscope.settings import parse_duration
from tests.fleet import fleetgen


def build(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Simulate, write OpenMetrics and backfill into root/tsdb, unless root holds that fleet.

    `--batch` servers per OpenMetrics file, two promtool runs at a time (100 servers x 7 days
    is ~90 GB of OpenMetrics text: it is written and backfilled a batch at a time).
    """
    key = {"servers": args.servers, "days": args.days, "interval_s": args.interval,
           "seeds": args.seeds}  # fmt: skip
    saved = root / "fleet.json"
    if saved.is_file():
        meta: dict[str, Any] = json.loads(saved.read_text())
        if {k: meta.get(k) for k in key} == key and (root / "tsdb").is_dir():
            return meta
        raise SystemExit(f"{root} holds another fleet ({saved}): give an empty --data")
    root.mkdir(parents=True, exist_ok=True)
    meta = dict(key)
    t = time.perf_counter()
    fleet = fleetgen.build_fleet(
        servers=args.servers, days=args.days, interval=args.interval, seeds=args.seeds
    )
    meta["simulate_s"] = round(time.perf_counter() - t, 1)
    write_s, size = 0.0, 0
    running: list[tuple[Any, Path]] = []
    t = time.perf_counter()
    batch = args.batch or len(fleet)
    for i in range(0, len(fleet), batch):
        om = root / f"history-{i}.om"
        w = time.perf_counter()
        fleetgen.write_openmetrics(fleet[i : i + batch], om)
        write_s += time.perf_counter() - w
        size += om.stat().st_size
        while len(running) >= 2:  # two promtools at a time; each batch's text deleted after
            running = [r for r in (_reap(p, f) for p, f in running) if r is not None]
            time.sleep(1)
        running.append((fleetgen.start_backfill(om, root / "tsdb", wait=False), om))
    while running:
        running = [r for r in (_reap(p, f) for p, f in running) if r is not None]
        time.sleep(1)
    meta["openmetrics_s"] = round(write_s, 1)
    meta["openmetrics_mb"] = round(size / 1e6)
    meta["build_s"] = round(time.perf_counter() - t, 1)
    scrapes = sum(len(s.rendered) for s in fleet)
    series = sum(1 for line in fleet[0].rendered[0][1].splitlines() if line[:1] not in "#")
    meta["samples"] = scrapes * series
    meta["start"] = min(s.start for s in fleet).isoformat()
    last = max(when for s in fleet for when, _ in s.texts)
    meta["end"] = (last + timedelta(seconds=1)).isoformat()
    saved.write_text(json.dumps(meta, indent=2))
    return meta


def _reap(proc: Any, om: Path) -> tuple[Any, Path] | None:
    """None once promtool is done (its input deleted); raises if it failed."""
    code = proc.poll()
    if code is None:
        return proc, om
    om.unlink()
    if code != 0:
        raise SystemExit(f"promtool failed on {om} (exit {code})")
    return None


def measure(argv: list[str], *, json_out: bool = True) -> dict[str, Any]:
    """Run the child: its JSON (when json_out), wall seconds, peak RSS (MB) and CPU seconds
    (from wait4's rusage)."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"report failed ({proc.returncode}): {err.decode()[-2000:]}")
        out.seek(0)
        return {
            "report": json.loads(out.read()) if json_out else None,
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "user_s": round(usage.ru_utime, 1),
            "sys_s": round(usage.ru_stime, 1),
            "load_1min": round(os.getloadavg()[0], 1),
        }


def profile(url: str, start: datetime, end: datetime, window: str | None) -> None:
    """The whole fleet report in-process under pyinstrument (printed to stderr).

    pyinstrument is not a dependency (`pip install pyinstrument` to use --profile).
    """
    import importlib

    from preemptscope.cli import main as cli

    profiler_class = importlib.import_module("pyinstrument").Profiler

    argv = ["report", "--prometheus", url, "--start", start.isoformat(), "--end",
            end.isoformat(), "--prometheus-timeout", "600s", "--json"]  # fmt: skip
    profiler = profiler_class()
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        profiler.start()
        cli([*argv, *(["--window", window] if window else [])])
        profiler.stop()
    print(profiler.output_text(unicode=False, show_all=False), file=sys.stderr)


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
    parser.add_argument("--seeds", type=int, default=2, help="simulations per profile")
    parser.add_argument("--batch", type=int, default=0, help="servers per OpenMetrics file")
    parser.add_argument("--build-only", action="store_true", help="build --data and stop")
    parser.add_argument("--since", default=None, help="read this long a range, ending at the end")
    parser.add_argument("--terminal", action="store_true", help="time the terminal report")
    parser.add_argument("--compare", default=None, help="also time git ref REF, alternately")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (with --compare)")
    parser.add_argument("--url", default=None, help="a Prometheus already serving --data's TSDB")
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
        span = ["--start", start.isoformat(), "--end", end.isoformat()]
        if args.since:
            span = ["--since", args.since, "--end", end.isoformat()]
            start = end - timedelta(seconds=parse_duration(args.since))
        with _prometheus(root, args.url) as url:
            if args.profile:
                profile(url, start, end, args.window)
            argv = ["report", "--prometheus", url, *span, "--prometheus-timeout", "600s",
                    *([] if args.terminal else ["--json"]),
                    *(["--window", args.window] if args.window else [])]  # fmt: skip
            contenders = [("this tree", _cli(None, *argv))]
            if args.compare:
                contenders.append((args.compare, _cli(checkout(args.compare), *argv)))
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in contenders}
            for i in range(args.repeat if args.compare else 1):
                for name, child in contenders if i % 2 == 0 else contenders[::-1]:
                    runs[name].append(measure(child, json_out=not args.terminal))
            first = runs["this tree"][0]
            out["report_s"] = first["wall_s"]
            out["report_peak_rss_mb"] = first["peak_rss_mb"]
            if not args.terminal:
                out.update(_summary(first["report"]))
            for measured in runs.values():
                for run in measured:
                    run.pop("report")
            out["runs"] = runs
            if args.compare:
                mine = statistics.median(r["wall_s"] for r in runs["this tree"])
                theirs = statistics.median(r["wall_s"] for r in runs[args.compare])
                out["wall_ratio"] = round(mine / theirs, 3)
    print(json.dumps(out, indent=2))
    return 0


@contextlib.contextmanager
def _prometheus(root: Path, url: str | None) -> Iterator[str]:
    """`url` when given (a Prometheus serving root/tsdb already), else one started on it."""
    if url is not None:
        yield url
        return
    with fleetgen.running_prometheus(root / "tsdb", root) as started:
        yield started


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the JSON report says about the fleet: window, verdicts, totals, raw reads."""
    out: dict[str, Any] = {"window_s": report["fleet"]["window_s"]}
    out["deployments"] = len(report["deployments"])
    verdicts = [d["verdict"]["state"] for d in report["deployments"]]
    out["verdicts"] = {v: verdicts.count(v) for v in sorted(set(verdicts))}
    out["preemptions"] = sum(d["preemptions"]["total"] or 0 for d in report["deployments"])
    records = [s["records"] for s in report["sources"] if s["kind"] == "metrics"]
    for key in ("scrapes", "windows", "windows_read_raw", "samples_read_raw"):
        out[key] = sum(r[key] for r in records)
    return out


if __name__ == "__main__":
    sys.exit(main())
