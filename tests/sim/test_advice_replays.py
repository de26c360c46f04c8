"""The advice check skips replays it can prove identical, and says the same as without."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from preemptscope.analysis import advice
from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.report import Advice, Capacity
from preemptscope.analysis.sim import engine, observed
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.observed import ObservedFigures, Replay

from tests.sim.traffic import long_chat


def _items() -> list[Advice]:
    return [
        Advice(0, "lower_max_num_seqs", "--max-num-seqs", "256", "200", "Fewer requests."),
        Advice(0, "lower_max_num_batched_tokens", "--max-num-batched-tokens", "8192", "4096", "."),
        Advice(0, "raise_gpu_memory_utilization", "--gpu-memory-utilization", "0.90", "0.95", "."),
        advice._more_gpus(Capacity(), "tensor"),
        advice._more_gpus(Capacity(), "pipeline"),
    ]


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
        out = advice._check(_items(), replay, capacity)
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
    replay = Replay(workload, config, ObservedFigures(requests=len(workload)))
    capacity = Capacity(max_num_seqs=256, peak_running=256, gpu_memory_utilization=0.9)
    skipped, fewer = _checked(replay, capacity, skipping=True)
    every, all_runs = _checked(replay, capacity, skipping=False)
    assert skipped == every
    assert fewer < all_runs  # TP and PP over two GPUs are one run; caps above the peak none
    assert any(a.verified for a in skipped)


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
