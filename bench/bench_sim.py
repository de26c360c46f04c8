"""Simulator speed, side by side with another commit's engine in one run (ratios).

Run: python bench/bench_sim.py [--against REV] [--log FILE] [--repeat 3]
Prints Markdown tables for docs/simulator.md ("Speed") and docs/benchmarks.md ("Simulator"):

1. engine runs (synthetic hours, the demo): this tree's `simulate` and REV's (default HEAD~1),
   alternating, best of --repeat; each pair's outputs are checked bit for bit as well;
2. the advice (`advice.advise`: the replay of now and every candidate) on the demo's
   over-capacity A10G (log + /metrics + bench) and on --log FILE (e.g. a log from
   bench/gen_logs.py), with REV's advice.py and engine against this tree's, the replay memo
   cleared before each call (cold, as `report` pays it once per deployment).

Timings are wall-clock on whatever machine runs it: compare the ratios, not across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

# A sibling in bench/ (not a package): mypy cannot follow it.
import sim_ab  # type: ignore[import-not-found]  # noqa: E402
from preemptscope.analysis import advice, analyze  # noqa: E402
from preemptscope.analysis.kvmodel import GPU_PRESETS  # noqa: E402
from preemptscope.analysis.sim import observed  # noqa: E402
from preemptscope.analysis.sim.config import SimConfig  # noqa: E402
from preemptscope.analysis.sim.engine import simulate  # noqa: E402
from preemptscope.analysis.sim.scenarios import demo_scenarios  # noqa: E402
from preemptscope.analysis.sim.workload import LengthDist, synthetic  # noqa: E402

from preemptscope.cli import main as cli_main  # noqa: E402
from preemptscope.inputs import load_inputs  # noqa: E402
from tests.sim.abcases import differences, fingerprint  # noqa: E402


def best(before: Callable[[], Any], after: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Least CPU time of each, the two alternating (the shared machine's load hits both)."""
    times = [float("inf"), float("inf")]
    for _ in range(repeat):
        for k, fn in enumerate((before, after)):
            began = time.process_time()
            fn()
            times[k] = min(times[k], time.process_time() - began)
    return times[0], times[1]


# Where a resumed request's budget check depends on its cache hit (tests/sim/abcases.py).
NEAR_MAX = LengthDist("lognormal", 220, 0.1, 16, 4096)
SHORT_OUT = LengthDist("lognormal", 60, 0.6, 4, 2048)
NEAR_MAX_CONFIG = SimConfig(
    gpu=GPU_PRESETS["L4"], num_gpu_blocks_override=200, block_size=8, max_num_seqs=64,
    enable_chunked_prefill=False, max_model_len=256, max_num_batched_tokens=256,
)  # fmt: skip


def _system_prompt() -> Any:
    """An hour at 2 req/s whose prompts all start with the same 1,024 tokens."""
    wl = synthetic(rate=2.0, duration=3600.0, seed=1)
    wl = dataclasses.replace(wl, prompt_len=wl.prompt_len + 1024)
    n = len(wl)
    return wl.with_prefix(np.zeros(n, dtype=np.int64), np.full(n, 1024, dtype=np.int64))


SYSTEM_PROMPT = _system_prompt()


def engine_rows(ref: Any, repeat: int) -> None:
    demo = demo_scenarios()[0]
    runs = [
        ("1 h at 20 req/s, Llama-3.1-8B on H100", synthetic(rate=20.0, duration=3600.0, seed=1),
         SimConfig(gpu=GPU_PRESETS["H100"]), False),
        ("same, recording every token (for ITL)", synthetic(rate=20.0, duration=3600.0, seed=1),
         SimConfig(gpu=GPU_PRESETS["H100"]), True),
        ("1 h at 2 req/s on A10G (heavy preemption)", synthetic(rate=2.0, duration=3600.0, seed=1),
         SimConfig(gpu=GPU_PRESETS["A10G"]), False),
        ("the demo's A10G, 10 min", demo.workload, demo.config, True),
        ("the same, tokens not recorded (as the advice replays)", demo.workload, demo.config,
         False),
        ("10 min at 20 req/s, prompts near max_model_len, no chunked prefill",
         synthetic(rate=20.0, duration=600.0, seed=6, prompt=NEAR_MAX, output=SHORT_OUT),
         NEAR_MAX_CONFIG, False),
        # Sharing changes the run (REV's engine ignores the prefix): outputs DIFFER by design.
        ("1 h at 2 req/s on A10G, a shared 1,024-token system prompt", SYSTEM_PROMPT,
         SimConfig(gpu=GPU_PRESETS["A10G"]), False),
    ]  # fmt: skip
    print("| run | engine steps | preemptions | before | after | speed-up | outputs |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, workload, config, tokens in runs:
        old = ref(workload, config, record_tokens=tokens)
        new = simulate(workload, config, record_tokens=tokens)
        same = not differences(fingerprint(old), fingerprint(new))
        t_old, t_new = best(
            lambda: ref(workload, config, record_tokens=tokens),  # noqa: B023
            lambda: simulate(workload, config, record_tokens=tokens),  # noqa: B023
            repeat,
        )
        outputs = "identical" if same else "DIFFER"
        print(f"| {label} | {len(new.steps):,} | {new.total_preemptions:,} | {t_old:.2f} s | "
              f"{t_new:.2f} s | {t_old / t_new:.1f}x | {outputs} |")  # fmt: skip


def captured(paths: list[str], metrics: list[str], bench: list[str]) -> tuple[Any, ...]:
    """The first over-capacity deployment's advice inputs, as `analyze` hands them over."""
    seen: list[tuple[Any, ...]] = []

    def spy(verdict: Any, capacity: Any, windows: Any, params: Any, replay: Any) -> Any:
        if not seen and verdict.state in ("over_capacity", "at_risk"):
            seen.append((verdict, capacity, windows, params, replay()))
        return advice.AdvicePlan([])

    with mock.patch.object(analyze, "advise", spy):
        analyze.analyze(load_inputs(paths, metrics, bench), analyze.AnalysisParams())
    if not seen:
        raise SystemExit(f"{paths}: no over-capacity deployment, no advice to check")
    return seen[0]


ADVICE_HEADER = (
    "| data | replayed requests | simulations before / after | before | after | speed-up "
    "| advice |\n|---|---:|---:|---:|---:|---:|---|"
)


def advice_row(modules: dict[str, Any], label: str, data: tuple[Any, ...], repeat: int) -> None:
    """`advice.advise` of REV (its advice.py and engine) and of this tree, memo cleared."""
    verdict, capacity, windows, params, replay = data
    calls = {"old": 0, "new": 0}

    def checked(which: str, check: Any, engine: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            calls[which] += 1
            result = engine(*args, **kwargs)
            if not hasattr(result, "budget_needed"):  # an engine from before it existed
                object.__setattr__(result, "budget_needed", 1 << 62)
            # an engine from before issue 24 has no prefix-cache counters
            for name in ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate"):
                if not hasattr(result, name):
                    object.__setattr__(result, name, None)
            return result

        observed._MEMO.clear()
        with mock.patch.object(observed, "simulate", run):
            found = check(verdict, capacity, windows, params, replay=lambda: replay)
        return getattr(found, "items", found)  # a list of Advice before AdvicePlan

    old_check, old_engine = modules["advice"].advise, modules["engine"].simulate
    same = checked("old", old_check, old_engine) == checked("new", advice.advise, simulate)
    runs = f"{calls['old']} / {calls['new']}"
    t_old, t_new = best(
        lambda: checked("old", old_check, old_engine),
        lambda: checked("new", advice.advise, simulate),
        repeat,
    )
    print(f"| {label} | {len(replay.workload):,} | {runs} | {t_old:.2f} s | {t_new:.2f} s | "
          f"{t_old / t_new:.1f}x | {'identical' if same else 'DIFFER'} |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default="HEAD~1", help="git revision to compare with")
    parser.add_argument("--log", action="append", default=[], help="a vLLM log to check too")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    modules = sim_ab.load_modules(args.against)
    print(f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"before = {sim_ab.git('rev-parse', '--short', args.against).strip()}, CPU seconds, "
          f"best of {args.repeat}")  # fmt: skip
    print()
    engine_rows(modules["engine"].simulate, args.repeat)
    print()
    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli_main(["demo", "--out", tmp, "--json"])
        d = Path(tmp) / "chat-a10g"
        sets = [("demo A10G, log + /metrics + bench", captured(
            [str(d / "vllm.log")], [str(d / "metrics")], [str(d / "bench.json")]))]  # fmt: skip
    sets += [(f"{Path(log).name} (log only)", captured([log], [], [])) for log in args.log]
    print(ADVICE_HEADER)
    for label, data in sets:
        advice_row(modules, label, data, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
