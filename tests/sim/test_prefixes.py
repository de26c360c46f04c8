"""Shared prefixes from prompt block hashes (analysis/sim/prefixes.py, observed.build_replay):
frames built here with ingest's interface (`prompt_block_hashes`, chained 16-token hashes)."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
from preemptscope.analysis.report import Capacity
from preemptscope.analysis.sim.observed import (
    ReplayFrames,
    build_replay,
    hit_rate_note,
)
from preemptscope.analysis.sim.observed_prefixes import PROMPT_HASHES
from preemptscope.analysis.sim.prefixes import (
    MAX_HASHED_BLOCKS,
    hashed_prefixes,
    prompt_lengths,
    usable_depths,
)

T0 = datetime(2026, 12, 1, 10, 0, 0)


def chain(tokens: list[int]) -> list[int]:
    """Ingest's interface: hash i covers tokens [0, 16 (i + 1)), chained; complete blocks only,
    at most 256."""
    out: list[int] = []
    h = hashlib.blake2b(digest_size=8)
    for i in range(min(len(tokens) // 16, MAX_HASHED_BLOCKS)):
        h.update(np.asarray(tokens[16 * i : 16 * (i + 1)], dtype=np.int64).tobytes())
        out.append(int.from_bytes(h.copy().digest(), "little"))
    return out


def prompts(
    rng: np.random.Generator, system: list[int], n: int, extra: int = 300
) -> list[list[int]]:
    """`n` prompts: `system`, then `extra`-ish tokens of their own."""
    return [system + rng.integers(0, 32000, int(rng.integers(extra // 2, extra))).tolist()
            for _ in range(n)]  # fmt: skip


def test_one_system_prompt_is_one_group_on_full_kv_blocks() -> None:
    rng = np.random.default_rng(1)
    system = rng.integers(0, 32000, 1120).tolist()  # 70 blocks of 16; 17.5 of 64
    texts = prompts(rng, system, 30)
    hashes: list[list[int] | None] = [chain(t) for t in texts]
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    plan = hashed_prefixes(hashes, 16, lengths)
    assert plan.groups == 1 and plan.grouped == 30
    assert set(plan.tokens.tolist()) == {1120}
    assert plan.saved_tokens == 29 * 1120 == plan.tree_tokens
    # Block size 64: only a hash that ends a full 64-token KV block stands for shared blocks.
    wide = hashed_prefixes(hashes, 64, lengths)
    assert set(wide.tokens.tolist()) == {1088}  # 17 x 64, not 1,120
    assert list(usable_depths(64)[:3]) == [4, 8, 12] and list(usable_depths(8)[:2]) == [1, 2]


def test_tenants_conversations_and_prompts_without_ids() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 32000, 512).tolist(), rng.integers(0, 32000, 256).tolist()
    texts = prompts(rng, a, 10) + prompts(rng, b, 6)
    hashes: list[list[int] | None] = [chain(t) for t in texts]
    hashes += [None, None]  # the log shows no ids for these
    lengths = np.array([len(t) for t in texts] + [400, 500], dtype=np.int64)
    plan = hashed_prefixes(hashes, 16, lengths)
    assert plan.groups == 2 and plan.hashed == 16
    assert (plan.group[:10] == plan.group[0]).all() and (plan.tokens[:10] == 512).all()
    assert (plan.group[10:16] == plan.group[10]).all() and (plan.tokens[10:16] == 256).all()
    assert plan.group[0] != plan.group[10] and (plan.group[16:] == -1).all()
    # Conversations: each second turn repeats its first turn. The tree keeps both depths:
    # the system prompt (a root every request shares) and each pair's first turn below it.
    system = rng.integers(0, 32000, 512).tolist()
    firsts = prompts(rng, system, 10, extra=140)
    turns = [t for f in firsts for t in (f, f + rng.integers(0, 32000, 40).tolist())]
    lengths = np.array([len(t) for t in turns], dtype=np.int64)
    plan = hashed_prefixes([chain(t) for t in turns], 16, lengths)
    assert plan.groups == 11 and plan.parent.tolist().count(-1) == 1
    (root,) = np.flatnonzero(plan.parent < 0)
    assert plan.node_tokens[root] == 512 and (plan.parent[plan.group] == root).all()
    assert all(plan.group[2 * i] == plan.group[2 * i + 1] for i in range(10))
    assert len(set(plan.group.tolist())) == 10 and (plan.tokens > 512).all()
    # The first turn's whole prompt, less its last token, on 16-token blocks.
    assert (plan.tokens[::2] == (lengths[::2] - 1) // 16 * 16).all()
    assert plan.saved_tokens == plan.tree_tokens == 19 * 512 + int((plan.tokens[::2] - 512).sum())
    # Long pairs below a short common start: the same tree.
    system = rng.integers(0, 32000, 32).tolist()
    firsts = prompts(rng, system, 4, extra=2000)
    turns = [t for f in firsts for t in (f, f + [7] * 40)]
    lengths = np.array([len(t) for t in turns], dtype=np.int64)
    plan = hashed_prefixes([chain(t) for t in turns], 16, lengths)
    assert plan.groups == 5 and all(plan.group[2 * i] == plan.group[2 * i + 1] for i in range(4))
    assert (plan.tokens > 1000).all() and plan.node_tokens[plan.parent[plan.group[0]]] == 32


def test_a_prefix_never_reaches_the_last_prompt_token() -> None:
    rng = np.random.default_rng(3)
    same = rng.integers(0, 32000, 320).tolist()  # exactly 20 blocks: the whole prompt
    hashes: list[list[int] | None] = [chain(same) for _ in range(5)]
    plan = hashed_prefixes(hashes, 16, np.full(5, 320, dtype=np.int64))
    assert set(plan.tokens.tolist()) == {304}  # 19 blocks: the last token is computed


def test_prompt_lengths_from_the_hash_counts() -> None:
    sampled = np.array([100, 5000, 3000, 40], dtype=np.int64)
    blocks = np.array([-1, 256, 256, 2], dtype=np.int64)
    assert prompt_lengths(blocks, sampled).tolist() == [100, 5000, 4104, 40]


def _log_frames(
    texts: list[list[int] | None], gap_s: float = 0.5
) -> tuple[pl.DataFrame, pl.Series, pl.DataFrame]:
    n = len(texts)
    starts = [T0 + timedelta(seconds=1 + gap_s * i) for i in range(n)]
    end = starts[-1] + timedelta(seconds=30)
    stamps = [
        T0 + timedelta(seconds=10 * i) for i in range(int((end - T0).total_seconds()) // 10 + 2)
    ]
    mean_prompt = np.mean([len(t) for t in texts if t is not None])
    stats = pl.DataFrame(
        {
            "timestamp": stamps,
            "prompt_throughput": [mean_prompt * n / (stamps[-1] - T0).total_seconds()]
            * len(stamps),
            "generation_throughput": [64.0 * n / (stamps[-1] - T0).total_seconds()] * len(stamps),
            "running": [4] * len(stamps),
            "prefix_cache_hit_rate": [0.7] * len(stamps),
        }
    )
    arrivals = pl.Series("timestamp", starts)
    hashes = pl.DataFrame(
        {"timestamp": starts, PROMPT_HASHES: [None if t is None else chain(t) for t in texts]},
        schema={"timestamp": pl.Datetime("us"), PROMPT_HASHES: pl.List(pl.UInt64)},
    )
    return stats, arrivals, hashes


def test_the_replay_takes_its_prefixes_from_the_hashes_and_states_the_hit_rate() -> None:
    rng = np.random.default_rng(4)
    system = rng.integers(0, 32000, 1024).tolist()
    texts: list[list[int] | None] = list(prompts(rng, system, 60))
    texts[5] = None  # no ids logged for this one
    stats, arrivals, hashes = _log_frames(texts)
    seen = Capacity(num_gpu_blocks=2000, block_size=16, max_num_seqs=16,
                    enable_prefix_caching=True)  # fmt: skip
    frames = ReplayFrames(stats=stats, arrivals=arrivals, prompt_hashes=hashes)
    replay = build_replay(seen, frames, preemptions=None)
    wl = replay.workload
    assert wl is not None and len(wl) == 60 and replay.prefix_basis == "hashes"
    group, tokens = wl.prefix_group, wl.prefix_tokens
    assert group is not None and tokens is not None
    assert (tokens[group >= 0] == 1024).all()
    assert group[5] == -1 and np.count_nonzero(group >= 0) == 59
    # Prompt lengths to 16 tokens from the hashed blocks (the request without ids: sampled).
    for i, t in enumerate(texts):
        if t is not None:
            assert wl.prompt_len[i] // 16 == len(t) // 16
    said = next(a for a in replay.assumptions if a.startswith("prompt block hashes"))
    assert "59 of 60" in said and "1 shared prefix, up to 1,024 tokens" in said
    assert not any("inferred from the counters" in a for a in replay.assumptions)
    now = replay.run()
    assert now.prefix_cache_hit_rate is not None and now.prefix_cache_hit_rate > 0.6
    note = hit_rate_note(replay, now)
    assert note is not None and "the deployment's 70%" in note and "block hashes" in note
    # The same log without hashes: the hit-rate inference, as before.
    plain = build_replay(seen, ReplayFrames(stats=stats, arrivals=arrivals), preemptions=None)
    assert plain.prefix_basis == "hit rate"
    assert any("inferred from the counters" in a for a in plain.assumptions)
    # Caching off in the server's args: the lengths, no sharing.
    off = build_replay(
        Capacity(num_gpu_blocks=2000, block_size=16, enable_prefix_caching=False),
        frames,
        preemptions=None,
    )
    assert off.workload is not None and not off.workload.shares_prefixes
    assert any("prefix caching is off" in a for a in off.assumptions)


def test_hashes_that_do_not_cover_the_replayed_requests_are_not_guessed_at() -> None:
    rng = np.random.default_rng(5)
    texts: list[list[int] | None] = list(prompts(rng, rng.integers(0, 9, 256).tolist(), 20))
    stats, arrivals, hashes = _log_frames(texts)
    frames = ReplayFrames(stats=stats, arrivals=arrivals, prompt_hashes=hashes.head(10))
    replay = build_replay(Capacity(num_gpu_blocks=2000, block_size=16), frames, preemptions=None)
    assert replay.prefix_basis != "hashes"
    assert any("cover 10 of the 20" in a for a in replay.assumptions)


@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_groups_follow_the_block_size(block_size: int) -> None:
    rng = np.random.default_rng(6)
    system = rng.integers(0, 32000, 700).tolist()
    texts = prompts(rng, system, 12)
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    plan = hashed_prefixes([chain(t) for t in texts], block_size, lengths)
    assert set(plan.tokens.tolist()) == {700 // block_size * block_size}


def test_prompt_lengths_are_exact_where_the_log_showed_every_id() -> None:
    rng = np.random.default_rng(7)
    texts: list[list[int] | None] = list(prompts(rng, rng.integers(0, 9, 512).tolist(), 20))
    stats, arrivals, hashes = _log_frames(texts)
    shown = [len(t) for t in texts if t is not None]
    hashes = hashes.with_columns(
        prompt_tokens=pl.Series(shown, dtype=pl.Int64),
        prompt_cut=pl.Series([i == 3 for i in range(20)]),  # request 3's list was cut
    )
    frames = ReplayFrames(stats=stats, arrivals=arrivals, prompt_hashes=hashes)
    seen = Capacity(num_gpu_blocks=2000, block_size=16, enable_prefix_caching=True)
    replay = build_replay(seen, frames, preemptions=None)
    wl = replay.workload
    assert wl is not None
    for i, n in enumerate(shown):
        assert wl.prompt_len[i] == (n // 16 * 16 + 8 if i == 3 else n)
    assert any("prompt lengths exact for 19 " in a for a in replay.assumptions)


def test_client_rows_take_the_logged_request_of_their_time_and_length() -> None:
    """hashes_for_rows: each client row takes the earliest logged request of its prompt
    length from 1 s before its start to 2 s after; the log may hold more requests (earlier
    ones, others' lengths); a row without one leaves the hashes out, said."""
    from preemptscope.analysis.sim.observed_prefixes import hashes_for_rows
    from preemptscope.analysis.sim.workload import Workload

    rng = np.random.default_rng(5)
    texts = [rng.integers(0, 32000, int(n)).tolist() for n in (300, 300, 500, 420, 300)]
    # Logged at whole seconds; the first is a request the client rows do not have.
    seconds = [0, 10, 10, 11, 13]
    frame = pl.DataFrame(
        {
            "timestamp": [T0 + timedelta(seconds=s) for s in seconds],
            PROMPT_HASHES: [chain(t) for t in texts],
            "prompt_tokens": [len(t) for t in texts],
            "prompt_cut": [False] * 5,
        }
    ).with_columns(pl.col("timestamp").dt.replace_time_zone("UTC"))
    # The client's rows: starts 10.6, 10.2, 11.9, 13.4 s (the 300 and the 500 in another order).
    starts = np.array([10.2, 10.6, 11.9, 13.4])
    wl = Workload(
        arrival=starts - starts[0],
        prompt_len=np.array([500, 300, 420, 300], dtype=np.int64),
        output_len=np.ones(4, dtype=np.int64),
        priority=np.zeros(4, dtype=np.int64),
    )
    last = (T0 + timedelta(seconds=13.4)).replace(tzinfo=UTC)
    said: list[str] = []
    got = hashes_for_rows(frame, last, wl, said)
    assert got == [chain(texts[2]), chain(texts[1]), chain(texts[3]), chain(texts[4])]
    assert not said
    # A row whose length no logged request has: no hashes, and the line says why.
    odd = dataclasses.replace(wl, prompt_len=np.array([500, 300, 421, 300], dtype=np.int64))
    assert hashes_for_rows(frame, last, odd, said) is None
    assert "1 of 4 rows have no logged request" in said[-1]
