"""Prefixes nested in others (a system prompt, then each conversation's earlier turns): the
engine shares every node on a request's chain (analysis/sim/prefix_cache.py), counted by hand
against the one-depth cut it replaced."""

from __future__ import annotations

import numpy as np
import pytest
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.workload import Workload

from preemptscope.errors import ConfigError

# Block size 16: the system prompt is 4 blocks (the root, node 0); each conversation's first
# turn adds 4 more (nodes 1 and 2, children of the root).
SYSTEM, TURN = 64, 128


def conversations(
    arrival: list[float], prompt: list[int], output: list[int], group: list[int]
) -> Workload:
    g = np.asarray(group, dtype=np.int64)
    node_tokens = np.array([SYSTEM, TURN, TURN], dtype=np.int64)
    return Workload(
        arrival=np.asarray(arrival, dtype=np.float64),
        prompt_len=np.asarray(prompt, dtype=np.int64),
        output_len=np.asarray(output, dtype=np.int64),
        priority=np.zeros(len(arrival), dtype=np.int64),
    ).with_prefix(g, node_tokens[g], np.array([-1, 0, 0], dtype=np.int64), node_tokens)


def config(blocks: int = 400) -> SimConfig:
    return SimConfig(num_gpu_blocks_override=blocks, max_model_len=1024, max_num_seqs=16)


def test_a_later_turn_hits_the_system_prompt_and_its_conversation() -> None:
    # Two first turns together, then each conversation's second turn once both have finished.
    wl = conversations([0.0, 0.0, 30.0, 30.0], [140, 140, 200, 200], [2, 2, 2, 2], [1, 2, 1, 2])
    result = simulate(wl, config())
    assert result.finished_mask.all() and result.total_preemptions == 0
    # Turn 1 of A: nothing cached. Turn 1 of B, admitted after it in the same step: the
    # system prompt's 64 tokens (A established them). Each second turn: the system prompt
    # and its own conversation's first turn, 128 tokens, from the free queue.
    assert result.prefix_cache_queries == 140 + 140 + 200 + 200
    assert result.prefix_cache_hits == 64 + 128 + 128
    # Cut at one depth it was 64 x 3 (all in the system prompt's group) or 128 x 2 (each
    # conversation its own group, the system prompt held once per conversation).
    flat = simulate(wl.with_prefix(np.zeros(4, dtype=np.int64), np.full(4, SYSTEM)), config())
    assert flat.prefix_cache_hits == 64 * 3


def test_running_members_hold_each_shared_block_once() -> None:
    # Two turns of conversation A and one of B, all at once: A's two share the root and A's
    # node (8 blocks), B shares the root (4 blocks).
    wl = conversations([0.0, 0.0, 0.0], [140, 150, 140], [2, 2, 2], [1, 1, 2])
    result = simulate(wl, config())
    # 9 + 10 + 9 blocks, less 8 (A's second turn) and 4 (B): 16. Per conversation as
    # separate roots it would be 20 (the system prompt twice), all in the root 20 too.
    assert int(result.steps.used_blocks.max()) == 9 + 10 + 9 - 8 - 4
    assert result.prefix_cache_hits == 128 + 64
    assert int(result.steps.used_blocks[-1]) == 0


@pytest.mark.parametrize(("blocks", "hit"), [(74, 128), (69, 64), (66, 16)])
def test_the_root_outlives_its_children_in_the_free_queue(blocks: int, hit: int) -> None:
    # A's first turn (9 blocks) runs alone and finishes: vLLM frees tail first, so the queue
    # holds the never-used blocks, then A's own block, A's node (4), the root (4). A filler
    # of 64 blocks (no prefix) takes them from the head; A's second turn then hits what is
    # left, root first, stopping at the first node not there whole.
    wl = Workload(
        arrival=np.array([0.0, 5.0, 30.0]),
        prompt_len=np.array([140, 1020, 200], dtype=np.int64),
        output_len=np.array([1, 1, 1], dtype=np.int64),
        priority=np.zeros(3, dtype=np.int64),
    ).with_prefix(
        np.array([1, -1, 1], dtype=np.int64),
        np.array([TURN, 0, TURN], dtype=np.int64),
        np.array([-1, 0, 0], dtype=np.int64),
        np.array([SYSTEM, TURN, TURN], dtype=np.int64),
    )
    # blocks - 1 usable, 9 of them A's: at 74, 64 never used, so the filler evicts nothing
    # (hit 128: the root and A's node); at 69, 59 never used, then A's own block and node
    # (hit 64: the root); at 66, 56, then 8 of A's 9: one root block left (hit 16).
    result = simulate(wl, config(blocks))
    assert result.finished_mask.all() and result.total_preemptions == 0
    assert result.prefix_cache_hits == hit


def test_a_tree_must_be_ordered_parents_first() -> None:
    base = Workload(
        arrival=np.zeros(2),
        prompt_len=np.array([100, 100], dtype=np.int64),
        output_len=np.array([1, 1], dtype=np.int64),
        priority=np.zeros(2, dtype=np.int64),
    )
    g = np.array([0, 1], dtype=np.int64)
    with pytest.raises(ConfigError):
        base.with_prefix(g, np.array([32, 64]), np.array([1, -1]), np.array([64, 32]))
    with pytest.raises(ConfigError):  # a child shorter than its parent
        base.with_prefix(g, np.array([64, 32]), np.array([-1, 0]), np.array([64, 32]))
    with pytest.raises(ConfigError):  # a group the tree does not have
        base.with_prefix(g, np.array([32, 64]), np.array([-1]), np.array([32]))
