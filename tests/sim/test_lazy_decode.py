"""Lazy decode (batch.py) decides exactly what the plain step-by-step loop decides.

The shortcuts (lazy decode, quiet runs, fast-forward) must never change a scheduling decision:
`simulate(..., fast_forward=False)` runs every step through engine.plain_step, which follows
vLLM's `Scheduler.schedule()`. Counts must agree exactly; times may differ only by the order
in which step times are added (a fast-forward's `clock + cumsum`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.analysis.sim.config import FittedStepCost, SimConfig
from preemptscope.analysis.sim.engine import SimResult, simulate
from preemptscope.analysis.sim.workload import Workload

from tests.sim.abcases import STEP_ARRAYS

# The golden fingerprint's step arrays but the step times (compared within 1 ns below).
STEP_COUNTS = tuple(name for name in STEP_ARRAYS if name not in ("start", "end"))
TIMES = ("first_scheduled", "first_token", "finish", "preempt_time", "resume_time")


def assert_same_run(lazy: SimResult, plain: SimResult) -> None:
    """Every decision equal; every time equal but for summation order (1 ns)."""
    assert len(lazy.steps) == len(plain.steps)
    for name in STEP_COUNTS:
        assert np.array_equal(getattr(lazy.steps, name), getattr(plain.steps, name)), name
    assert np.array_equal(lazy.preempt_request, plain.preempt_request)
    assert np.array_equal(lazy.num_preemptions, plain.num_preemptions)
    assert lazy.budget_needed == plain.budget_needed
    for name in TIMES:
        a, b = getattr(lazy, name), getattr(plain, name)
        assert a.shape == b.shape, name
        assert np.allclose(a, b, rtol=0, atol=1e-9, equal_nan=True), name
    for a, b in ((lazy.steps.start, plain.steps.start), (lazy.steps.end, plain.steps.end)):
        assert np.allclose(a, b, rtol=0, atol=1e-9)
    assert abs(lazy.end_time - plain.end_time) <= 1e-9
    order_lazy = np.lexsort((lazy.token_time, lazy.token_request))
    order_plain = np.lexsort((plain.token_time, plain.token_request))
    assert np.array_equal(lazy.token_request[order_lazy], plain.token_request[order_plain])
    assert np.allclose(
        lazy.token_time[order_lazy], plain.token_time[order_plain], rtol=0, atol=1e-9
    )


# Four requests, KV for 26 blocks of 8 tokens, no chunked prefill (budget = max_model_len =
# 64). Request 3 (55-token prompt) is admitted last, preempted at the first block shortage
# with 63 tokens (55 + 8 generated), and waits at the head of the queue with 5 of its 7 full
# blocks still cached when request 0 finishes.
RESUMED = Workload(
    arrival=np.array([0.03, 0.08, 0.12, 0.13]),
    prompt_len=np.array([41, 21, 47, 55], dtype=np.int64),
    output_len=np.array([41, 50, 52, 41], dtype=np.int64),
    priority=np.zeros(4, dtype=np.int64),
)
NO_CHUNKED = SimConfig(
    num_gpu_blocks_override=27,
    block_size=8,
    max_model_len=64,
    max_num_seqs=6,
    max_num_batched_tokens=64,
    enable_chunked_prefill=False,
)


def test_a_resumed_request_is_checked_against_the_budget_less_its_cache_hit() -> None:
    # vLLM 0.33 (scheduler.py, the waiting loop): the prefix-cache hit comes first, then
    # `num_new_tokens = request.num_tokens - num_computed_tokens` and, without chunked
    # prefill, `if num_new_tokens > request_token_budget: break`. When request 0 finishes,
    # two decoders leave a budget of 62: request 3 needs 63 - 40 cached = 23 of it, and its
    # whole sequence (8 blocks) fits the 13 free blocks, so it is resumed in that very step.
    # Lazy decode used to compare all 63 tokens with the budget and kept it waiting a step.
    runs = {
        (lazy, tokens): simulate(RESUMED, NO_CHUNKED, fast_forward=lazy, record_tokens=tokens)
        for lazy in (True, False)
        for tokens in (True, False)
    }
    for (lazy, tokens), run in runs.items():
        assert run.preempt_request.tolist() == [3]
        assert run.resume_time[0] == run.finish[0]  # the step right after request 0's
        k = int(np.searchsorted(run.steps.start, run.resume_time[0]))
        assert run.steps.scheduled_tokens[k] == 2 + 23
        assert run.steps.prefill_tokens[k] == 23
        # Before it, the whole sequence was refused for KV blocks (not for the budget).
        assert run.steps.kv_blocked[k - 1]
        if lazy:
            assert_same_run(run, runs[(False, tokens)])


# Request 2 (58-token prompt, priority 2) is preempted by request 3 and waits at the head of
# the queue while two requests decode (budget 64 - 2 = 62). With 63 tokens it fits the budget
# only while at least one block of its cache survives; the decoders' new blocks come from the
# free queue's head and evict its cached blocks one by one.
SHRINKING_HIT = Workload(
    arrival=np.array([0.03, 0.04, 0.05, 0.09]),
    prompt_len=np.array([2, 41, 58, 36], dtype=np.int64),
    output_len=np.array([11, 54, 22, 49], dtype=np.int64),
    priority=np.array([2, 2, 2, 1], dtype=np.int64),
)


def test_a_waiting_request_whose_cache_hit_shrinks_turns_from_kv_to_budget() -> None:
    # vLLM checks the budget before it asks for blocks: once the hit no longer covers the
    # gap, the request is refused for the budget (no allocate_slots call), not for KV
    # blocks. A run of decode steps taken at once (fast-forward, lazy) must stop there.
    config = dataclasses.replace(
        NO_CHUNKED, num_gpu_blocks_override=60, block_size=2, max_num_seqs=5,
        scheduling_policy="priority",
    )  # fmt: skip
    for tokens in (True, False):
        plain = simulate(SHRINKING_HIT, config, fast_forward=False, record_tokens=tokens)
        assert plain.preempt_request.tolist() == [2]
        # From request 3's admission to request 2's return: KV first, then the budget.
        start = plain.steps.start
        waits = (start > plain.first_scheduled[3]) & (start < plain.resume_time[0])
        blocked = plain.steps.kv_blocked[waits]
        turn = int(np.argmin(blocked))
        assert blocked[:turn].all() and turn > 0 and not blocked[turn:].any()
        assert_same_run(simulate(SHRINKING_HIT, config, record_tokens=tokens), plain)


# Five requests decode (budget 64 - 5 = 59) while resumed request 8 (39 tokens, 32 of them
# cached at first) waits for KV blocks; its cached blocks are evicted one by one meanwhile.
EVICTED_HIT = Workload(
    arrival=np.repeat([0.0, 0.0625], [6, 5]),
    prompt_len=np.array([1, 1, 1, 1, 1, 1, 29, 33, 30, 1, 1], dtype=np.int64),
    output_len=np.array([1, 1, 1, 33, 33, 33, 28, 27, 10, 1, 1], dtype=np.int64),
    priority=np.zeros(11, dtype=np.int64),
)


def test_every_step_rechecks_a_blocked_resumed_head_against_the_budget() -> None:
    # budget_needed (the least max_num_batched_tokens that gives this very run) must count
    # the head's check in every step, with the hit it has then: 5 + 39 once it is all gone.
    config = dataclasses.replace(
        NO_CHUNKED, num_gpu_blocks_override=15, block_size=16, scheduler_reserve_full_isl=False
    )
    for tokens in (True, False):
        plain = simulate(EVICTED_HIT, config, fast_forward=False, record_tokens=tokens)
        assert plain.preempt_request.tolist() == [8, 7]
        assert plain.budget_needed == 5 + 39
        assert_same_run(simulate(EVICTED_HIT, config, record_tokens=tokens), plain)


FITTED = FittedStepCost(per_step_s=0.02, per_prefill_token_s=1.2e-4, per_decode_token_s=4e-4)
# With a context cost the lazy decode's steps lengthen as the batch's context grows.
FITTED_CONTEXT = dataclasses.replace(FITTED, per_context_token_s=4e-5)


@st.composite
def small_runs(draw: st.DrawFn) -> tuple[Workload, SimConfig, dict[str, object]]:
    """A few requests, tiny KV (preemption is common) and any scheduler setting."""
    max_model_len = draw(st.sampled_from([64, 128, 256, 512]))
    block_size = draw(st.sampled_from([1, 4, 8, 16, 32]))
    n = draw(st.integers(1, 32))
    gaps = draw(st.lists(st.floats(0.0, 0.1), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, max_model_len - 1), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, max_model_len), min_size=n, max_size=n))
    priorities = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    # vLLM needs one max-length request to fit, beside the pool's null block (block 0).
    min_blocks = -(-max_model_len // block_size) + 1
    blocks = draw(st.integers(min_blocks, 4 * min_blocks))
    max_num_seqs = draw(st.integers(1, 24))
    chunked = draw(st.booleans())
    low = max_model_len if not chunked else max(max_num_seqs, 8)
    # The budget binds most often at its least (without chunked prefill: max_model_len).
    budget = draw(st.one_of(st.just(low), st.integers(low, 2 * max_model_len)))
    config = SimConfig(
        num_gpu_blocks_override=blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        enable_prefix_caching=draw(st.booleans()),
        scheduler_reserve_full_isl=draw(st.booleans()),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.05])),
        step_cost=draw(st.sampled_from([None, FITTED, FITTED_CONTEXT])),
    )
    workload = Workload(
        arrival=np.cumsum(np.asarray(gaps)),
        prompt_len=np.asarray(prompts, dtype=np.int64),
        output_len=np.asarray(outputs, dtype=np.int64),
        priority=np.asarray(priorities, dtype=np.int64),
    )
    kwargs: dict[str, object] = {
        "record_tokens": draw(st.booleans()),
        "until": draw(st.sampled_from([None, None, None, 0.5, 2.0])),
    }
    return workload, config, kwargs


@st.composite
def budget_bound_runs(draw: st.DrawFn) -> tuple[Workload, SimConfig, dict[str, object]]:
    """No chunked prefill, the least budget vLLM allows (max_model_len), prefix caching:
    where a resumed request's budget check depends on its cache hit. The lazy decode of
    f598d30 fails about one of these runs in ten; runs of steps taken at once that miss a
    shrinking hit, about one in 150 (the tests above pin one case of each)."""
    workload, config, kwargs = draw(small_runs())
    max_model_len = draw(st.sampled_from([64, 128]))
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    n = len(workload)
    min_blocks = -(-max_model_len // block_size) + 1
    config = dataclasses.replace(
        config,
        num_gpu_blocks_override=draw(st.integers(min_blocks, 4 * min_blocks)),
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=draw(st.integers(2, 24)),
        max_num_batched_tokens=max_model_len,
        enable_chunked_prefill=False,
        enable_prefix_caching=True,
        watermark=0.0,
    )
    workload = dataclasses.replace(
        workload,
        arrival=np.cumsum(draw(st.lists(st.floats(0.0, 0.05), min_size=n, max_size=n))),
        prompt_len=np.asarray(
            draw(st.lists(st.integers(1, max_model_len - 1), min_size=n, max_size=n)),
            dtype=np.int64,
        ),
    )
    return workload, config, kwargs


def run_both(case: tuple[Workload, SimConfig, dict[str, object]]) -> None:
    workload, config, kwargs = case
    lazy = simulate(workload, config, fast_forward=True, **kwargs)  # type: ignore[arg-type]
    plain = simulate(workload, config, fast_forward=False, **kwargs)  # type: ignore[arg-type]
    assert_same_run(lazy, plain)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_runs())
def test_lazy_decode_and_plain_steps_agree(
    case: tuple[Workload, SimConfig, dict[str, object]],
) -> None:
    run_both(case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget_bound_runs())
def test_lazy_decode_and_plain_steps_agree_where_the_budget_binds(
    case: tuple[Workload, SimConfig, dict[str, object]],
) -> None:
    run_both(case)


@st.composite
def shared_prefix_runs(draw: st.DrawFn) -> tuple[Workload, SimConfig, dict[str, object]]:
    """Prompts that share prefixes (up to three groups, some requests in none), prefix
    caching on: the shared blocks' reference counts and free-queue positions must make the
    same decisions in lazy and plain steps."""
    workload, config, kwargs = draw(small_runs())
    config = dataclasses.replace(config, enable_prefix_caching=True)
    n = len(workload)
    longest = config.max_model_len - 1
    lengths = [draw(st.integers(1, max(1, longest - 1))) for _ in range(3)]
    group = np.asarray(draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)), dtype=np.int64)
    prefix = np.asarray([lengths[g] if g >= 0 else 0 for g in group.tolist()], dtype=np.int64)
    # A member's prompt is its group's prefix and at least one token more.
    prompt = np.where(group >= 0, np.maximum(workload.prompt_len, prefix + 1), workload.prompt_len)
    prompt = np.minimum(prompt, longest)
    group = np.where(prefix < prompt, group, -1)
    workload = dataclasses.replace(workload, prompt_len=prompt.astype(np.int64))
    return workload.with_prefix(group, np.where(group >= 0, prefix, 0)), config, kwargs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_prefix_runs())
def test_lazy_decode_and_plain_steps_agree_with_shared_prefixes(
    case: tuple[Workload, SimConfig, dict[str, object]],
) -> None:
    run_both_sharing(case)


def run_both_sharing(case: tuple[Workload, SimConfig, dict[str, object]]) -> None:
    workload, config, kwargs = case
    lazy = simulate(workload, config, fast_forward=True, **kwargs)  # type: ignore[arg-type]
    plain = simulate(workload, config, fast_forward=False, **kwargs)  # type: ignore[arg-type]
    assert_same_run(lazy, plain)
    assert lazy.prefix_cache_hits == plain.prefix_cache_hits
    assert lazy.prefix_cache_queries == plain.prefix_cache_queries
    # Blocks are neither lost nor made: every finished run ends with all of them free.
    if kwargs["until"] is None:
        assert plain.finished_mask.all()
        assert plain.steps.used_blocks[-1] == 0


@st.composite
def nested_prefix_runs(draw: st.DrawFn) -> tuple[Workload, SimConfig, dict[str, object]]:
    """Prefixes nested in others: a tree of four nodes (node 1 below node 0, node 2 below
    node 0 or 1 or a root, node 3 a root), members of any node or none, prefix caching on."""
    workload, config, kwargs = draw(small_runs())
    config = dataclasses.replace(config, enable_prefix_caching=True)
    n = len(workload)
    longest = config.max_model_len - 1
    parent = np.array([-1, 0, draw(st.integers(-1, 1)), -1], dtype=np.int64)
    node_tokens = np.zeros(4, dtype=np.int64)
    for g in range(4):
        below = int(node_tokens[parent[g]]) if parent[g] >= 0 else 1
        node_tokens[g] = draw(st.integers(below, max(below, longest - 1)))
    group = np.asarray(draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n)), dtype=np.int64)
    prefix = np.where(group >= 0, node_tokens[group], 0)
    prompt = np.where(group >= 0, np.maximum(workload.prompt_len, prefix + 1), workload.prompt_len)
    prompt = np.minimum(prompt, longest)
    group = np.where(prefix < prompt, group, -1)
    workload = dataclasses.replace(workload, prompt_len=prompt.astype(np.int64))
    tokens = np.where(group >= 0, prefix, 0)
    return workload.with_prefix(group, tokens, parent, node_tokens), config, kwargs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_prefix_runs())
def test_lazy_decode_and_plain_steps_agree_with_nested_prefixes(
    case: tuple[Workload, SimConfig, dict[str, object]],
) -> None:
    run_both_sharing(case)
