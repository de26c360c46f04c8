"""Properties every simulation must keep, over random small workloads and settings.

That the shortcuts change no decision of the plain loop: tests/sim/test_lazy_decode.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import engine_key, simulate
from preemptscope.analysis.sim.whatif import peak_running
from preemptscope.analysis.sim.workload import Workload

from tests.sim.abcases import differences, fingerprint


@st.composite
def cases(draw: st.DrawFn) -> tuple[Workload, SimConfig]:
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.floats(0.0, 0.5), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    priorities = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    block_size = draw(st.sampled_from([1, 8, 16, 32]))
    max_model_len = 512
    # vLLM needs one max-length request to fit, beside the pool's null block (block 0).
    min_blocks = -(-max_model_len // block_size) + 1
    blocks = draw(st.integers(min_blocks, min_blocks * 2))  # tight: preemption is common
    max_num_seqs = draw(st.integers(1, 32))
    config = SimConfig(
        num_gpu_blocks_override=blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=draw(st.integers(max(max_num_seqs, 64), 2048)),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
    )
    workload = Workload(
        arrival=np.cumsum(np.asarray(gaps)),
        prompt_len=np.asarray(prompts, dtype=np.int64),
        output_len=np.asarray(outputs, dtype=np.int64),
        priority=np.asarray(priorities, dtype=np.int64),
    )
    return workload, config


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_scheduler_invariants(case: tuple[Workload, SimConfig]) -> None:
    workload, config = case
    result = simulate(workload, config)
    steps = result.steps
    total_blocks = result.capacity.num_gpu_blocks
    # Everybody finishes (recompute guarantees progress) and gets exactly their tokens.
    assert result.finished_mask.all()
    assert int(steps.generation_tokens.sum()) == int(result.output_len.sum())
    assert len(result.token_time) == int(result.output_len.sum())
    # Limits hold at every step.
    assert steps.used_blocks.max() <= total_blocks
    assert steps.used_blocks.min() >= 0
    assert steps.running.max() <= config.max_num_seqs
    assert steps.scheduled_tokens.max() <= config.max_num_batched_tokens
    # Time only moves forward; each request's events are in order.
    assert (np.diff(steps.end) >= 0).all()
    assert (result.first_scheduled >= workload.arrival).all()
    assert (result.first_token > result.first_scheduled).all()
    assert (result.finish >= result.first_token).all()
    # Preemptions are counted once each, per request and per step.
    assert int(result.num_preemptions.sum()) == result.total_preemptions
    assert int(steps.preemptions.sum()) == result.total_preemptions
    assert not np.isnan(result.resume_time).any()
    assert (result.resume_time >= result.preempt_time).all()
    # The idle engine holds no blocks at the end.
    assert steps.used_blocks[-1] == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(1, 300), st.booleans())
def test_a_cap_above_the_peak_changes_nothing(
    case: tuple[Workload, SimConfig], extra: int, tokens: bool
) -> None:
    """The advice skips replaying a max_num_seqs that never binds: the run is bit-identical."""
    workload, config = case
    now = simulate(workload, config, record_tokens=tokens)
    peak = peak_running(now)
    if peak >= config.max_num_seqs:
        return  # the cap bound: another cap may change the run
    other = dataclasses.replace(
        config,
        max_num_seqs=peak + extra,
        max_num_batched_tokens=max(config.max_num_batched_tokens, peak + extra),
    )
    if other.max_num_batched_tokens != config.max_num_batched_tokens:
        return  # the token budget is another setting
    again = simulate(workload, other, record_tokens=tokens)
    assert differences(fingerprint(now), fingerprint(again)) == []


def test_tensor_and_pipeline_parallel_over_the_same_gpus_share_a_key() -> None:
    base = SimConfig(num_gpu_blocks_override=4000)
    tp, pp = base.with_changes({"tp": 2}), base.with_changes({"pp": 2})
    assert tp != pp and engine_key(tp) == engine_key(pp)
    assert engine_key(base) != engine_key(tp)  # the roofline sees the GPU count


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.floats(0.0, 1.0), st.booleans())
def test_a_budget_above_what_the_run_needed_changes_nothing(
    case: tuple[Workload, SimConfig], where: float, tokens: bool
) -> None:
    """The advice skips replaying a smaller max_num_batched_tokens the run never needed."""
    workload, config = case
    now = simulate(workload, config, record_tokens=tokens)
    low = max(now.budget_needed, config.max_num_seqs)
    if low >= config.max_num_batched_tokens:
        return  # the budget bound, or there is nothing smaller to try
    budget = low + int(where * (config.max_num_batched_tokens - 1 - low))
    again = simulate(
        workload, dataclasses.replace(config, max_num_batched_tokens=budget), record_tokens=tokens
    )
    assert differences(fingerprint(now), fingerprint(again)) == []
