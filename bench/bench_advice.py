"""What checking the advice by simulation costs: analyze() with and without the replay, side
by side in one run (ratios; the machine is shared and noisy).

Run: python bench/bench_advice.py [--minutes 10] [--repeat 3]
Writes the demo's files into a temporary folder, then times `analyze` on the over-capacity
deployment (log + /metrics + bench) with the advice replayed and with the replay switched off.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path
from unittest import mock

from preemptscope.analysis import analyze as analyze_module
from preemptscope.analysis.analyze import AnalysisParams, analyze
from preemptscope.analysis.sim import observed

from preemptscope.cli import main
from preemptscope.inputs import load_inputs


def timed(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def run() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp())
    with contextlib.redirect_stdout(io.StringIO()):
        main(["demo", "--out", str(out), "--duration", f"{args.minutes}m", "--json"])
    d = out / "chat-a10g"
    inputs = load_inputs([str(d / "vllm.log")], [str(d / "metrics")], [str(d / "bench.json")])
    params = AnalysisParams()

    def with_check() -> None:
        observed._MEMO.clear()  # cold: every replay simulated
        analyze(inputs, params)

    def warm() -> None:  # the same data again, as the live service between arrivals
        analyze(inputs, params)

    def without_check() -> None:
        with mock.patch.object(analyze_module, "build_replay", lambda *a, **k: None):
            analyze(inputs, params)

    b, a, w = (timed(f, args.repeat) for f in (without_check, with_check, warm))
    requests = inputs[0].latencies.height if inputs[0].latencies is not None else 0
    print("| data | analyze, no replay | with the advice replayed (cold) | ratio | warm |")
    print(f"| demo A10G, {args.minutes} min, {requests} requests | {b:.2f} s | {a:.2f} s | "
          f"{a / b:.1f}x | {w:.2f} s |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
