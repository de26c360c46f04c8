"""Shared prefixes from the log's prompt block hashes (ingest's `prompt_block_hashes`).

Where a log shows a request's prompt token ids, ingest keeps chained hashes of the prompt's
complete 16-token blocks (hash i covers tokens [0, 16(i+1)): equal hash i means equal first
16(i+1) tokens), at most MAX_HASHED_BLOCKS of them, null where the log shows no ids. vLLM's
prefix cache shares full KV blocks, so only a hash at a 16-token boundary that also ends a
full KV block of the server's block_size can stand for shared blocks.

The hashes form a tree (chained: requests with the same hash at a depth have the same hash
at every shallower one). Its nodes are the prefixes two or more requests have where those
requests part ways or one of them ends (a system prompt every request has; below it each
conversation's earlier turns, which its later turns repeat); each request's group is its
deepest node, each node names its parent (Workload.prefix_parent / prefix_node_tokens), and
the engine shares every node on a request's chain from the root. O(depths x n log n): one
sort of the requests' hashes per usable depth. Pure: arrays in.
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
    """Per request: its deepest shared-prefix node (-1: none) and that prefix's tokens, the
    hashed blocks it has (-1: no hashes); per node: its parent (-1: a root) and tokens."""

    group: IntArray
    tokens: IntArray
    hashed_blocks: IntArray
    parent: IntArray
    node_tokens: IntArray
    groups: int  # nodes: prefixes of two or more requests
    grouped: int  # requests in them
    saved_tokens: int  # prefill tokens the nodes share: each node's own tokens x (requests - 1)
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
    """The shared-prefix tree the prompts' block hashes show (see the module doc).

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
    # shared[j, r]: how many requests have r's prefix of depths[j] blocks (0: r is shorter).
    shared = np.zeros((len(depths), n), dtype=np.int64)
    for j, d in enumerate(depths):
        rows = np.flatnonzero(reach >= d)
        if len(rows) < 2:
            shared = shared[:j]
            break
        _, inverse, sizes = np.unique(table[rows, d - 1], return_inverse=True, return_counts=True)
        shared[j, rows] = sizes[inverse]
    # A node: a prefix two or more requests have, where the requests that have it part ways
    # (fewer have the next depth's) or one ends. Hashes are chained: the requests with the
    # same hash at a depth are a subset of those with the same hash at every shallower one.
    deeper = np.vstack([shared[1:], np.zeros((1, n), dtype=np.int64)]) if len(shared) else shared
    is_node = (shared >= 2) & (deeper < shared)
    group = np.full(n, -1, dtype=np.int64)
    parent: list[int] = []
    node_tokens: list[int] = []
    for j in np.flatnonzero(is_node.any(axis=1)).tolist():
        d = int(depths[j])
        rows = np.flatnonzero(is_node[j])
        _, first, inverse = np.unique(table[rows, d - 1], return_index=True, return_inverse=True)
        base = len(parent)
        for k in np.argsort(first, kind="stable").tolist():  # in first-member order
            parent.append(int(group[rows[first[k]]]))  # the member's deepest node so far
            node_tokens.append(d * HASH_BLOCK_TOKENS)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        group[rows] = base + rank[inverse]
    tokens = np.where(group >= 0, np.asarray([*node_tokens, 0], dtype=np.int64)[group], 0)
    parents = np.asarray(parent, dtype=np.int64)
    own = np.asarray(node_tokens, dtype=np.int64) - np.where(
        parents >= 0, np.asarray([*node_tokens, 0], dtype=np.int64)[parents], 0
    )
    # Each node's own tokens are computed once (by its first member), shared by the rest.
    members = np.bincount(group[group >= 0], minlength=len(parent))
    subtree = members.copy()
    for g in range(len(parent) - 1, -1, -1):  # children come after their parents
        if parents[g] >= 0:
            subtree[parents[g]] += subtree[g]
    return HashedPrefixes(
        group=group,
        tokens=tokens,
        hashed_blocks=counts,
        parent=parents,
        node_tokens=np.asarray(node_tokens, dtype=np.int64),
        groups=len(parent),
        grouped=int((group >= 0).sum()),
        saved_tokens=int((own * np.maximum(subtree - 1, 0)).sum()),
        tree_tokens=_tree_tokens(table, reach, depths),
    )


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
