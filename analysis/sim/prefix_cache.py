"""vLLM's prefix cache and free queue as the simulation keeps them, as counts (a Batch base).

Owns which blocks survive a finish or a preemption in the free queue, a resumed request's hit
on its own blocks, and prefixes shared across requests by group (reference counts, the last
holder frees, a hit charges no prefill). Never schedules, steps or times anything: Batch and
engine._Run do that. Pure numpy and Python; no I/O.
"""

from __future__ import annotations

import numpy as np
from preemptscope.analysis.sim.steps import WaitingQueue
from preemptscope.analysis.sim.workload import IntArray, Workload


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
        """Shared-prefix groups: per group, the full blocks its members share (below each
        member's last prompt token, which vLLM always recomputes), how many running requests
        hold them (ref), how many are established, and where they wait in the free queue
        when nobody holds them."""
        group, tokens = workload.prefix_group, workload.prefix_tokens
        self.sharing = self.caching and workload.shares_prefixes
        self.fresh_hits = 0  # prefix-cache hit tokens of first admissions (vLLM's counter)
        self.group: IntArray = np.full(self.n, -1, dtype=np.int64)
        self.shared = np.zeros(self.n, dtype=np.int64)  # group blocks r holds while running
        self.shared_at_preempt: dict[int, int] = {}  # a victim's group blocks: its own follow
        self.g_blocks: list[int] = []
        self.g_ref: list[int] = []
        self.g_est: list[int] = []
        self.g_cache: dict[int, tuple[int, int]] = {}  # group -> (queue position, blocks)
        if not self.sharing or group is None or tokens is None:
            return
        self.group = group.astype(np.int64)
        members = self.group >= 0
        count = int(self.group.max()) + 1
        per = np.minimum(tokens // self.bs, (self.prompt - 1) // self.bs)
        blocks = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(blocks, self.group[members], per[members])
        self.g_blocks = np.where(blocks == np.iinfo(np.int64).max, 0, blocks).tolist()
        self.g_ref = [0] * count
        self.g_est = [0] * count

    def lookup(self, r: int, free: int) -> tuple[int, int]:
        """(hit tokens, blocks of the hit that running requests hold) for admitting r.

        vLLM's get_computed_blocks: the longest chain of cached full blocks, the group's
        prefix first (held by a running request, or still in the free queue), then r's own
        blocks from before a preemption, capped so the last token is recomputed. Held blocks
        cost no free block; blocks taken back from the free queue do (allocate_slots counts
        evictable hits).
        """
        g = int(self.group[r])
        own = r in self.cached
        if g < 0:
            return (self.cache_hit(r, free) if own else 0), 0
        held = self.g_ref[g] > 0
        if held:
            prefix = self.g_est[g]
        elif g in self.g_cache:
            pos, count = self.g_cache[g]
            prefix = min(max(pos + count - (self.total_blocks - free) - self.freed_total, 0), count)
        else:
            prefix = 0
        hit = prefix
        if own:
            start = self.shared_at_preempt.get(r, 0)
            if prefix >= start:
                hit = max(prefix, start + self.survivors(r, free))
        hit = min(hit, (int(self.ntok[r]) - 1) // self.bs)
        return hit * self.bs, (min(hit, self.g_est[g]) if held else 0)

    def hold(self, r: int, hit: int, tokens: int) -> tuple[int, int, int, tuple[int, int] | None]:
        """r, admitted with `hit` tokens from the cache and `tokens` scheduled, holds its
        group's blocks (the first holder establishes those its first chunk covers).
        Returns what unhold_pick needs to undo it."""
        g = int(self.group[r])
        undo = (g, self.g_ref[g], self.g_est[g], self.g_cache.get(g))
        if not self.g_ref[g]:
            self.g_est[g] = min(self.g_blocks[g], (hit + tokens) // self.bs)
            self.g_cache.pop(g, None)
        self.shared[r] = self.g_est[g]
        self.g_ref[g] += 1
        return undo

    def unhold_pick(self, r: int, undo: tuple[int, int, int, tuple[int, int] | None]) -> None:
        g, ref, est, cache = undo
        self.g_ref[g], self.g_est[g] = ref, est
        if cache is not None:
            self.g_cache[g] = cache
        self.shared[r] = 0

    def leave(self, r: int, blocks: int, computed: int, victim: bool) -> int:
        """r stops running (finish or preemption) holding `blocks`; returns the blocks freed.

        vLLM frees a request's blocks tail first; a block others still reference stays in
        use, so the group's blocks are freed by the last holder only, last into the queue.
        A victim's own full blocks stay cached for its resumption (prefix caching).
        """
        tail = self.total_blocks + self.freed_total
        g = int(self.group[r])
        share = kept = 0
        if g >= 0:
            share = int(self.shared[r])
            self.shared[r] = 0
            self.g_ref[g] -= 1
            if self.g_ref[g]:
                kept = share
            else:
                self.g_cache[g] = (tail + blocks - share, min(share, computed // self.bs))
        if victim and self.caching:
            self.cached[r] = (tail, blocks - share, max(computed // self.bs - share, 0))
            if share:
                self.shared_at_preempt[r] = share
        freed = blocks - kept
        self.freed_total += freed
        return freed

    def head_hit_moves(self) -> bool:
        """The head of the queue is a group member whose hit can shrink while decode steps
        allocate (its blocks wait in the free queue): no steps are taken at once then."""
        if not self.sharing or not len(self.waiting):
            return False
        r = self.waiting.peek()
        g = int(self.group[r])
        return g >= 0 and (r in self.cached or (not self.g_ref[g] and g in self.g_cache))
