"""Shared prefixes from the log's prompt block hashes (ingest's `prompt_block_hashes`).

Where a log shows a request's prompt token ids, ingest keeps chained hashes of the prompt's
complete 16-token blocks (hash i covers tokens [0, 16(i+1)): equal hash i means equal first
16(i+1) tokens), at most MAX_HASHED_BLOCKS of them, null where the log shows no ids. vLLM's
prefix cache shares full KV blocks, so only a hash at a 16-token boundary that also ends a
full KV block of the server's block_size can stand for shared blocks.

The engine shares one prefix per request (Workload.prefix_group / prefix_tokens: a group's
members share its first tokens). The hashes form a tree; it is cut into such groups greedily,
root cluster by root cluster (requests with the same first full KV block): the depth d whose
groups (requests with the same hash at d) would save the most prefill tokens, d x (members -
groups), is taken; requests left in no group of two or more are clustered again, and so on.
A tree with sharing at two depths (a system prompt, then conversations) becomes the groups of
the depth that saves more, plus what is left at the other: the blocks two groups have in
common are held once per group in the replay (said in docs/simulator.md). Pure: arrays in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

HASH_BLOCK_TOKENS = 16  # tokens per hashed block (ingest's granularity)
MAX_HASHED_BLOCKS = 256  # ingest keeps at most this many hashes per prompt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class HashedPrefixes:
    """Per request: its shared-prefix group (-1: none) and the prefix's tokens, the hashed
    blocks it has (-1: no hashes), and what the cut keeps of the tree."""

    group: IntArray
    tokens: IntArray
    hashed_blocks: IntArray
    groups: int  # groups of two or more requests
    grouped: int  # requests in them
    saved_tokens: int  # prefill tokens the groups share: (members - 1) x prefix, summed
    tree_tokens: int  # the same for the whole tree: each request's longest prefix seen before

    @property
    def hashed(self) -> int:
        return int((self.hashed_blocks >= 0).sum())


def usable_depths(block_size: int) -> IntArray:
    """Prefix lengths, in 16-token blocks, that end on a full KV block of `block_size`."""
    unit = np.lcm(HASH_BLOCK_TOKENS, block_size) // HASH_BLOCK_TOKENS
    depths: IntArray = np.arange(unit, MAX_HASHED_BLOCKS + 1, unit, dtype=np.int64)
    return depths


def hashed_prefixes(
    hashes: Sequence[Sequence[int] | None], block_size: int, prompt_len: IntArray
) -> HashedPrefixes:
    """The shared-prefix groups the prompts' block hashes show (see the module doc).

    A prefix stays shorter than its prompt (vLLM always computes a prompt's last token)."""
    n = len(hashes)
    counts = np.array([-1 if h is None else min(len(h), MAX_HASHED_BLOCKS) for h in hashes],
                      dtype=np.int64)  # fmt: skip
    width = int(counts.max()) if n else 0
    table = np.zeros((n, max(width, 1)), dtype=np.uint64)
    for i, h in enumerate(hashes):
        if h is not None and counts[i] > 0:
            table[i, : counts[i]] = np.asarray(h[: counts[i]], dtype=np.uint64)
    # A prefix never reaches a prompt's last token: at most (prompt - 1) // 16 blocks.
    reach = np.minimum(counts, (np.asarray(prompt_len, dtype=np.int64) - 1) // HASH_BLOCK_TOKENS)
    depths = usable_depths(block_size)
    depths = depths[depths <= width]
    group = np.full(n, -1, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    next_group = 0
    saved = 0
    pending = [np.flatnonzero(reach >= depths[0])] if len(depths) else []
    while pending:
        rows = pending.pop()
        if len(rows) < 2:
            continue
        for _, part in _split(table, rows, int(depths[0])):
            if len(part) < 2:
                continue
            best = (0, 0)  # (saved tokens, depth)
            for d in depths:
                have = part[reach[part] >= d]
                if len(have) < 2:
                    break
                kinds = len(np.unique(table[have, d - 1]))
                gain = int(d) * HASH_BLOCK_TOKENS * (len(have) - kinds)
                if gain > best[0]:
                    best = (gain, int(d))
            if not best[0]:
                continue
            d = best[1]
            left: list[IntArray] = [part[reach[part] < d]]
            for _, members in _split(table, part[reach[part] >= d], d):
                if len(members) < 2:
                    left.append(members)
                    continue
                group[members] = next_group
                tokens[members] = d * HASH_BLOCK_TOKENS
                saved += (len(members) - 1) * d * HASH_BLOCK_TOKENS
                next_group += 1
            rest = np.sort(np.concatenate(left))
            if 2 <= len(rest) < len(part):
                pending.append(rest)
    return HashedPrefixes(
        group=group,
        tokens=tokens,
        hashed_blocks=counts,
        groups=next_group,
        grouped=int((group >= 0).sum()),
        saved_tokens=saved,
        tree_tokens=_tree_tokens(table, reach, depths),
    )


def _split(table: npt.NDArray[np.uint64], rows: IntArray, depth: int) -> list[tuple[int, IntArray]]:
    """`rows` by their hash at `depth` (all have at least `depth` blocks), in first-row order."""
    keys = table[rows, depth - 1]
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    return [(int(k), rows[inverse == k]) for k in order]


def _tree_tokens(table: npt.NDArray[np.uint64], reach: IntArray, depths: IntArray) -> int:
    """Prefill tokens the whole tree shares: each request's deepest usable prefix that an
    earlier request had too (what a cache that never evicts would hit)."""
    best = np.zeros(len(reach), dtype=np.int64)
    for d in depths:
        rows = np.flatnonzero(reach >= d)
        if len(rows) < 2:
            break
        _, first = np.unique(table[rows, d - 1], return_index=True)
        seen = np.ones(len(rows), dtype=bool)
        seen[first] = False  # the first request with this prefix computes it
        best[rows[seen]] = d  # chained: seen at d means seen at every shallower depth
    return int(best.sum()) * HASH_BLOCK_TOKENS


def prompt_lengths(hashed_blocks: IntArray, sampled: IntArray) -> IntArray:
    """Prompt lengths the hashes bound: 16 n to 16 n + 15 tokens for n complete blocks (the
    middle, 16 n + 8, is replayed); at the cap of MAX_HASHED_BLOCKS, at least that many
    blocks (the sampled length when longer). Requests without hashes keep `sampled`."""
    blocks = hashed_blocks
    middle = blocks * HASH_BLOCK_TOKENS + HASH_BLOCK_TOKENS // 2
    out: IntArray = np.where(
        blocks < 0,
        sampled,
        np.where(blocks >= MAX_HASHED_BLOCKS, np.maximum(sampled, middle), middle),
    ).astype(np.int64)
    return out
