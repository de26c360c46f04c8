"""vLLM's prefix cache and free queue as the simulation keeps them, as counts (a Batch base).

Owns which blocks survive a finish or a preemption in the free queue, a resumed request's hit
on its own blocks, and prefixes shared across requests as a tree of nodes (reference counts,
the last holder frees, a hit charges no prefill). Never schedules, steps or times anything:
Batch and engine._Run do that. Pure numpy and Python; no I/O.
"""

from __future__ import annotations

import numpy as np
from preemptscope.analysis.sim.steps import WaitingQueue
from preemptscope.analysis.sim.workload import IntArray, Workload

# What hold() changed, per node of the request's chain: (node, ref, established, queue entry).
Undo = tuple[tuple[int, int, int, tuple[int, int] | None], ...]


class PrefixCache:
    """The free queue and the prefix cache's state; Batch.__init__ sets the shared fields."""

    # Set by Batch.__init__ (the simulation's state), read here.
    n: int
    bs: int
    total_blocks: int
    caching: bool
    prompt: IntArray
    ntok: IntArray
    waiting: WaitingQueue
    # The free queue, as counts: blocks ever appended to its tail, and per preempted request
    # the queue position of its freed blocks, their count and how many were full (hashed).
    freed_total: int
    cached: dict[int, tuple[int, int, int]]

    def release(self, blocks: int) -> None:
        """Blocks appended to the free queue's tail (a finish or a preemption)."""
        self.freed_total += blocks

    def on_preempt(self, victim: int, blocks: int, computed: int) -> int:
        """The free queue learns where a victim's blocks went; returns the blocks freed."""
        if self.sharing:
            return self.leave(victim, blocks, computed, True)
        if self.caching:
            tail = self.total_blocks + self.freed_total
            self.cached[victim] = (tail, blocks, computed // self.bs)
        self.freed_total += blocks
        return blocks

    def cache_hit(self, r: int, free: int) -> int:
        """Tokens a resumed request gets back from its own surviving blocks (0: none).

        vLLM frees a request's blocks tail first, so its last blocks meet the head first and
        the survivors are a prefix; only full blocks are hashed, and the last token is always
        recomputed (kv_cache_manager.get_computed_blocks).
        """
        return min(self.survivors(r, free), (int(self.ntok[r]) - 1) // self.bs) * self.bs

    def survivors(self, r: int, free: int) -> int:
        """A victim's own full blocks that no allocation has reached yet (a prefix of them)."""
        seg = self.cached.get(r)
        if seg is None:
            return 0
        pos, count, full = seg
        head = (self.total_blocks - free) + self.freed_total
        return min(max(pos + count - head, 0), count, full)

    def init_sharing(self, workload: Workload) -> None:
        """Shared prefixes as a tree of nodes (a system prompt, then each conversation's
        earlier turns): a request's group is its deepest node, and it shares every node on
        the chain from the root to it. Per node: the full blocks of its own segment (those
        past its parent's, below each member's last prompt token, which vLLM always
        recomputes), how many running requests hold it (ref: those whose chain passes
        through it), how many of its blocks are established, and where they wait in the
        free queue when nobody holds them. Without a tree every group is a root."""
        group, tokens = workload.prefix_group, workload.prefix_tokens
        self.sharing = self.caching and workload.shares_prefixes
        self.fresh_hits = 0  # prefix-cache hit tokens of first admissions (vLLM's counter)
        self.group: IntArray = np.full(self.n, -1, dtype=np.int64)
        self.shared = np.zeros(self.n, dtype=np.int64)  # group blocks r holds while running
        self.shared_at_preempt: dict[int, int] = {}  # a victim's group blocks: its own follow
        self.g_start: list[int] = []  # blocks before the node's segment (its parent's end)
        self.g_blocks: list[int] = []  # blocks of the node's own segment
        self.g_chain: list[tuple[int, ...]] = []  # root ... node
        self.g_ref: list[int] = []
        self.g_est: list[int] = []  # established blocks of the node's own segment
        self.g_cache: dict[int, tuple[int, int]] = {}  # node -> (queue position, blocks)
        if not self.sharing or group is None or tokens is None:
            return
        self.group = group.astype(np.int64)
        members = self.group >= 0
        parents = workload.prefix_parent
        count = int(self.group.max()) + 1
        if parents is None or workload.prefix_node_tokens is None:
            per = np.minimum(tokens // self.bs, (self.prompt - 1) // self.bs)
            blocks = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(blocks, self.group[members], per[members])
            ends = np.where(blocks == np.iinfo(np.int64).max, 0, blocks).tolist()
            up = [-1] * count
        else:
            count = len(parents)
            ends = (workload.prefix_node_tokens // self.bs).tolist()
            up = parents.tolist()
        for g in range(count):  # a parent comes before its children
            p = up[g]
            start = ends[p] if p >= 0 else 0
            self.g_start.append(start)
            self.g_blocks.append(max(ends[g] - start, 0))
            self.g_chain.append((*self.g_chain[p], g) if p >= 0 else (g,))
        self.g_ref = [0] * count
        self.g_est = [0] * count

    def lookup(self, r: int, free: int) -> tuple[int, int]:
        """(hit tokens, blocks of the hit that running requests hold) for admitting r.

        vLLM's get_computed_blocks: the longest chain of cached full blocks, the prefix's
        nodes root first (each held by a running request, or still in the free queue; the
        chain stops at the first node not there whole), then r's own blocks from before a
        preemption, capped so the last token is recomputed. Held blocks cost no free block;
        blocks taken back from the free queue do (allocate_slots counts evictable hits).
        """
        g = int(self.group[r])
        own = r in self.cached
        if g < 0:
            return (self.cache_hit(r, free) if own else 0), 0
        prefix = held = 0
        head = (self.total_blocks - free) + self.freed_total
        for node in self.g_chain[g]:
            if self.g_ref[node] > 0:
                got = self.g_est[node]
                held += got  # a held node's ancestors are held too
            elif node in self.g_cache:
                pos, count = self.g_cache[node]
                got = min(max(pos + count - head, 0), count)
            else:
                got = 0
            prefix += got
            if got < self.g_blocks[node]:
                break
        hit = prefix
        if own:
            start = self.shared_at_preempt.get(r, 0)
            if prefix >= start:
                hit = max(prefix, start + self.survivors(r, free))
        hit = min(hit, (int(self.ntok[r]) - 1) // self.bs)
        return hit * self.bs, min(hit, held)

    def hold(self, r: int, hit: int, tokens: int) -> Undo:
        """r, admitted with `hit` tokens from the cache and `tokens` scheduled, holds its
        chain's blocks (the first holder of a node establishes those its first chunk covers,
        none past a node not established whole). Returns what unhold_pick needs to undo it."""
        undo = []
        covered = (hit + tokens) // self.bs
        whole = True  # every node before this one is established whole
        share = 0
        for node in self.g_chain[int(self.group[r])]:
            undo.append((node, self.g_ref[node], self.g_est[node], self.g_cache.get(node)))
            if not self.g_ref[node]:
                start = self.g_start[node]
                seg = min(self.g_blocks[node], max(covered - start, 0)) if whole else 0
                self.g_est[node] = seg
                self.g_cache.pop(node, None)
            self.g_ref[node] += 1
            share += self.g_est[node]
            whole = whole and self.g_est[node] >= self.g_blocks[node]
        self.shared[r] = share
        return tuple(undo)

    def unhold_pick(self, r: int, undo: Undo) -> None:
        for node, ref, est, cache in undo:
            self.g_ref[node], self.g_est[node] = ref, est
            if cache is not None:
                self.g_cache[node] = cache
        self.shared[r] = 0

    def leave(self, r: int, blocks: int, computed: int, victim: bool) -> int:
        """r stops running (finish or preemption) holding `blocks`; returns the blocks freed.

        vLLM frees a request's blocks tail first; a block others still reference stays in
        use, so a node's blocks are freed by its last holder only: its own blocks first,
        then the nodes nobody else holds, deepest first (the root's are evicted last).
        A victim's own full blocks stay cached for its resumption (prefix caching).
        """
        tail = self.total_blocks + self.freed_total
        g = int(self.group[r])
        share = kept = 0
        if g >= 0:
            share = int(self.shared[r])
            self.shared[r] = 0
            pos = tail + blocks - share
            for node in reversed(self.g_chain[g]):
                self.g_ref[node] -= 1
                est = self.g_est[node]
                if self.g_ref[node]:
                    kept += est
                else:
                    done = max(computed // self.bs - self.g_start[node], 0)
                    self.g_cache[node] = (pos, min(est, done))
                    pos += est
        if victim and self.caching:
            self.cached[r] = (tail, blocks - share, max(computed // self.bs - share, 0))
            if share:
                self.shared_at_preempt[r] = share
        freed = blocks - kept
        self.freed_total += freed
        return freed

    def head_hit_moves(self) -> bool:
        """The head of the queue is a member whose hit can shrink while decode steps allocate
        (blocks it would hit wait in the free queue): no steps are taken at once then."""
        if not self.sharing or not len(self.waiting):
            return False
        r = self.waiting.peek()
        g = int(self.group[r])
        if g < 0:
            return False
        if r in self.cached:
            return True
        return any(not self.g_ref[node] and node in self.g_cache for node in self.g_chain[g])
