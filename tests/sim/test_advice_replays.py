"""The advice skips replays it can prove identical, and says the same as without."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from preemptscope.analysis import advice
from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.report import Advice, Capacity, Verdict
from preemptscope.analysis.sim import engine, observed
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.observed import ObservedFigures, Replay

from tests.sim.traffic import long_chat

VERDICT = Verdict("over_capacity", [], "capacity", "kv_cache")


def _as_observed(replay: Replay) -> Replay:
    """The replay with its own run of now as what was observed: the advice is verified."""
    now = replay.run()
    seen = ObservedFigures(now.requests, now.preemptions, now.output_throughput, now.e2e_p99)
    return dataclasses.replace(replay, observed=seen)


def _checked(replay: Replay, capacity: Capacity, *, skipping: bool) -> tuple[list[Advice], int]:
    runs = 0
    real = engine.simulate

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal runs
        runs += 1
        return real(*args, **kwargs)

    def always(replay: Replay, changes: dict[str, Any], *_: Any) -> Any:
        return replay.run(changes)

    observed._MEMO.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(observed, "simulate", counted)
        if not skipping:
            patch.setattr(advice, "_replayed", always)
        out = advice.advise(VERDICT, capacity, [], replay=lambda: replay).items
    observed._MEMO.clear()
    return out, runs


@pytest.mark.parametrize("blocks", [1600, 3000])
def test_skipped_replays_change_no_advice(blocks: int) -> None:
    config = SimConfig(
        gpu=GPU_PRESETS["A10G"],
        num_gpu_blocks_override=blocks,
        step_cost=None,
    )
    workload = long_chat(rate=0.6, duration=150.0, seed=11)
    replay = _as_observed(Replay(workload, config, ObservedFigures(requests=len(workload))))
    capacity = Capacity(max_num_seqs=256, peak_running=256, gpu_memory_utilization=0.9)
    skipped, fewer = _checked(replay, capacity, skipping=True)
    every, all_runs = _checked(replay, capacity, skipping=False)
    assert skipped == every
    assert fewer < all_runs  # TP and PP over two GPUs are one run; caps above the peak none
    assert skipped and all(a.verified for a in skipped)


def test_a_cap_above_the_peak_is_not_replayed() -> None:
    config = SimConfig(gpu=GPU_PRESETS["A10G"], num_gpu_blocks_override=3000)
    workload = long_chat(rate=0.3, duration=120.0, seed=12)
    replay = Replay(workload, config, ObservedFigures(requests=len(workload)))
    now = replay.run()
    assert now.peak_running < 128
    runs: dict[tuple[Any, ...], Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Replay, "run", lambda *a, **k: pytest.fail("replayed"))
        same = advice._replayed(replay, {"max_num_seqs": 128}, now, runs)
    assert dataclasses.replace(same, settings=now.settings) == now
    assert same.settings["max_num_seqs"] == 128
