"""The simulator behaves like vLLM's V1 scheduler."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.steps import WaitingQueue, schedule_running
from preemptscope.analysis.sim.workload import FloatArray, Workload, synthetic

from tests.sim.traffic import long_chat


def burst(n: int, prompt: int, output: int, *, priorities: list[int] | None = None) -> Workload:
    """n identical requests arriving together at t=0 (deterministic, no randomness)."""
    return Workload(
        arrival=np.zeros(n),
        prompt_len=np.full(n, prompt, dtype=np.int64),
        output_len=np.full(n, output, dtype=np.int64),
        priority=np.asarray(priorities or [0] * n, dtype=np.int64),
    )


def small(blocks: int, **changes: object) -> SimConfig:
    return SimConfig(num_gpu_blocks_override=blocks, max_model_len=256, **changes)  # type: ignore[arg-type]


def test_no_preemption_when_kv_is_ample() -> None:
    config = SimConfig(gpu=GPU_PRESETS["H100"])
    result = simulate(synthetic(rate=4, duration=120, seed=3), config)
    assert result.total_preemptions == 0
    assert result.finished_mask.all()
    assert result.steps.used_blocks.max() < result.capacity.num_gpu_blocks


def test_preemption_starts_exactly_when_kv_demand_exceeds_blocks() -> None:
    # 10 requests x (64 + 64) tokens = 10 x 8 blocks of 16 at peak, plus the null block.
    workload = burst(10, 64, 64)
    assert simulate(workload, small(81)).total_preemptions == 0
    tight = simulate(workload, small(80))
    assert tight.total_preemptions > 0
    assert tight.finished_mask.all()  # recompute lets everyone finish eventually


def test_preempted_requests_go_to_the_front_and_do_not_starve() -> None:
    config = SimConfig(gpu=GPU_PRESETS["L4"], max_num_seqs=64)
    workload = long_chat(rate=1.5, duration=300, seed=7)
    result = simulate(workload, config)
    assert result.total_preemptions > 50  # heavy preemption in this scenario
    assert result.finished_mask.all()  # nobody starves
    assert not np.isnan(result.resume_time).any()
    first = result.first_scheduled
    for t_pre, t_res in zip(result.preempt_time, result.resume_time, strict=True):
        # Between a preemption and the victim's return, no NEW request is admitted: the
        # victim waits at the head of the queue, ahead of everything that arrived before.
        assert not np.any((first > t_pre) & (first < t_res))
    # Recompute is bounded: no request is preempted over and over.
    assert result.num_preemptions.max() <= 10


def test_fcfs_and_priority_victims() -> None:
    def run(policy_priority: bool) -> tuple[list[int], list[int]]:
        prio = np.array([0, 1, 0], dtype=np.int64)
        arrival = np.array([0.0, 1.0, 2.0])
        ntok = np.array([33, 33, 33], dtype=np.int64)  # each needs a third block now
        computed = np.array([32, 32, 32], dtype=np.int64)
        blocks = np.array([2, 2, 2], dtype=np.int64)
        running = [0, 1, 2]
        waiting = WaitingQueue("priority" if policy_priority else "fcfs", prio, arrival)
        npre = np.zeros(3, dtype=np.int64)
        pre_t: list[float] = []
        pre_r: list[int] = []
        schedule_running(
            running, waiting, ntok, computed, blocks, prio, arrival,
            npre, pre_t, pre_r, 5.0, 8192, 0, 16, policy_priority,
        )  # fmt: skip
        return pre_r, running

    victims, running = run(policy_priority=False)
    assert victims[0] == 2  # fcfs: the last running request
    victims, running = run(policy_priority=True)
    assert victims[0] == 1  # priority: the lowest priority (largest value), not the last
    assert 1 not in running


def test_priority_self_preemption_goes_on_to_the_next_request() -> None:
    # Request 0 (priority 1, the lowest) needs a block and none is free: it preempts itself.
    # vLLM 0.33 then schedules request 1 (priority 0), which fits; it does not stop there.
    prio = np.array([1, 0], dtype=np.int64)
    arrival = np.array([1.0, 0.0])
    ntok = np.array([33, 20], dtype=np.int64)
    computed = np.array([32, 19], dtype=np.int64)  # 0 needs a third block, 1 does not
    blocks = np.array([2, 2], dtype=np.int64)
    running = [0, 1]
    sched, _, free, preempted = schedule_running(
        running, WaitingQueue("priority", prio, arrival), ntok, computed, blocks, prio,
        arrival, np.zeros(2, dtype=np.int64), [], [], 0.0, 8192, 0, 16, True,
    )  # fmt: skip
    assert preempted == 1
    assert running == [1]
    assert sched == {1: 1}  # the old engine stopped here: {} and one wasted step
    assert free == 2


def test_priority_policy_protects_high_priority_requests() -> None:
    config = dataclasses.replace(
        SimConfig(gpu=GPU_PRESETS["L4"], max_num_seqs=64), scheduling_policy="priority"
    )
    # One request in five is high priority (0).
    workload = long_chat(rate=1.5, duration=240, seed=11, priorities=(0, 1, 1, 1, 1))
    result = simulate(workload, config)
    high = result.num_preemptions[workload.priority == 0].sum()
    low = result.num_preemptions[workload.priority == 1].sum()
    assert low > 50
    # High-priority requests are victims only when no low-priority request is running (a
    # lowest-priority request that preempts itself lets the loop go on to higher ones, which
    # may then preempt where no low one is left: vLLM 0.33 does the same).
    assert high < low / 10
    e2e_high = (result.finish - workload.arrival)[workload.priority == 0].mean()
    e2e_low = (result.finish - workload.arrival)[workload.priority == 1].mean()
    assert e2e_high < e2e_low / 2


def test_front_of_queue_unit() -> None:
    waiting = WaitingQueue("fcfs", np.zeros(3, dtype=np.int64), np.zeros(3))
    waiting.add(0)
    waiting.add(1)
    waiting.prepend(2)
    assert [waiting.pop() for _ in range(3)] == [2, 0, 1]


def test_deterministic_with_a_seed() -> None:
    config = SimConfig(gpu=GPU_PRESETS["L4"])
    a = simulate(synthetic(rate=1.0, duration=120, seed=5), config)
    b = simulate(synthetic(rate=1.0, duration=120, seed=5), config)
    c = simulate(synthetic(rate=1.0, duration=120, seed=6), config)
    assert np.array_equal(a.finish, b.finish)
    assert np.array_equal(a.preempt_time, b.preempt_time)
    assert a.workload.ids() == b.workload.ids()
    assert not np.array_equal(a.workload.arrival, c.workload.arrival)


@pytest.mark.parametrize("gpu", ["L4", "H100"])
def test_fast_forward_changes_nothing(gpu: str) -> None:
    config = SimConfig(gpu=GPU_PRESETS[gpu], max_num_seqs=48)
    workload = synthetic(rate=1.2, duration=90, seed=2)
    fast = simulate(workload, config, fast_forward=True)
    slow = simulate(workload, config, fast_forward=False)

    # Same trajectory; times differ only by float summation order (cumsum vs one by one).
    def same(a: FloatArray, b: FloatArray) -> bool:
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=0, atol=1e-6, equal_nan=True))

    assert same(fast.finish, slow.finish)
    assert same(fast.first_token, slow.first_token)
    assert same(fast.preempt_time, slow.preempt_time)
    assert np.array_equal(fast.preempt_request, slow.preempt_request)
    assert same(np.sort(fast.token_time), np.sort(slow.token_time))
    assert len(fast.steps) == len(slow.steps)


def test_token_accounting_is_exact() -> None:
    result = simulate(burst(12, 100, 40), small(60))
    assert result.finished_mask.all()
    assert int(result.steps.generation_tokens.sum()) == 12 * 40
    assert len(result.token_time) == 12 * 40
    # Every preemption forces the victim's prompt and generated tokens to be recomputed.
    assert int(result.steps.prefill_tokens.sum()) > 12 * 100
    _req, _, gaps = result.itls()
    assert len(gaps) == 12 * 39 and (gaps > 0).all()


def test_max_num_seqs_caps_the_batch_and_chunked_prefill_budget() -> None:
    result = simulate(burst(40, 600, 8), SimConfig(max_num_seqs=8, max_num_batched_tokens=1024))
    assert result.steps.running.max() <= 8
    assert result.steps.scheduled_tokens.max() <= 1024


def test_lengths_clamped_to_max_model_len() -> None:
    result = simulate(burst(2, 300, 100), small(100))
    assert result.clamped_requests == 2
    assert (result.prompt_len + result.output_len <= 256).all()


def test_long_lazy_stretch_matches_plain_loop() -> None:
    # Many short requests through a small batch with ample KV: the lazy batch admits and
    # retires hundreds of entries without a flush, so its arrays compact in place.
    n = 900
    workload = Workload(
        arrival=np.arange(n, dtype=np.float64) * np.float64(0.05),
        prompt_len=np.full(n, 40, dtype=np.int64),
        output_len=(np.arange(n) % 7 + 20).astype(np.int64),
        priority=np.zeros(n, dtype=np.int64),
    )
    config = SimConfig(gpu=GPU_PRESETS["H100"], max_num_seqs=4)
    fast = simulate(workload, config)
    slow = simulate(workload, config, fast_forward=False)
    assert np.allclose(fast.finish, slow.finish, rtol=0, atol=1e-6)
    assert np.array_equal(fast.steps.running, slow.steps.running)
    assert np.array_equal(fast.steps.used_blocks, slow.steps.used_blocks)
    assert len(fast.token_time) == len(slow.token_time) == int(workload.output_len.sum())


def test_whole_prompt_admission_waits_where_a_first_chunk_would_preempt() -> None:
    # Long prompts, a small token budget: the first chunk of each fits, the whole prompt not.
    workload = Workload(
        arrival=np.arange(12, dtype=np.float64) * 0.05,
        prompt_len=np.full(12, 600, dtype=np.int64),
        output_len=np.full(12, 200, dtype=np.int64),
        priority=np.zeros(12, dtype=np.int64),
    )
    config = SimConfig(num_gpu_blocks_override=200, max_model_len=1024, max_num_batched_tokens=256)
    whole = simulate(workload, config)
    partial = simulate(workload, dataclasses.replace(config, scheduler_reserve_full_isl=False))
    assert whole.finished_mask.all() and partial.finished_mask.all()
    assert partial.total_preemptions > whole.total_preemptions


def test_a_resumed_request_gets_its_surviving_blocks_back() -> None:
    workload = long_chat(rate=1.5, duration=120, seed=7)
    config = SimConfig(gpu=GPU_PRESETS["L4"], max_num_seqs=64)
    cached = simulate(workload, config, record_tokens=False)
    cold = simulate(
        workload, dataclasses.replace(config, enable_prefix_caching=False), record_tokens=False
    )
    assert cached.total_preemptions > 0 and cold.total_preemptions > 0

    def recomputed(result: object) -> int:
        steps = result.steps  # type: ignore[attr-defined]
        return int(steps.prefill_tokens.sum()) - int(result.prompt_len.sum())  # type: ignore[attr-defined]

    # Recompute after preemption covers only the evicted part with prefix caching.
    assert recomputed(cached) / cached.total_preemptions < recomputed(cold) / cold.total_preemptions


def test_watermark_keeps_blocks_free_for_running_requests() -> None:
    workload = burst(10, 64, 64)
    loose = simulate(workload, small(81))
    kept = simulate(workload, small(81, watermark=0.6))
    assert loose.total_preemptions == 0 and kept.total_preemptions == 0
    # The watermark holds back admissions: fewer requests run at once.
    assert kept.steps.running.max() < loose.steps.running.max()
