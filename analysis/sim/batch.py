"""The simulation's state and its lazy decode batch, used by engine.simulate.

Batch holds the per-request arrays, the running batch, the waiting queue and the step log,
and runs the lazy decode steps (docs/simulator.md, "Speed"): a batch of decoders advanced by a
step counter, with admissions, finishes, preemption (fcfs) and quiet runs of steps taken in
it, each with the same arithmetic as the plain step it stands for. engine._Run adds the loop,
the plain step and the result. Pure numpy and Python; no I/O.
"""

from __future__ import annotations

import heapq

import numpy as np
from preemptscope.analysis.sim.config import SimConfig, cost_model
from preemptscope.analysis.sim.prefix_cache import PrefixCache, Undo
from preemptscope.analysis.sim.steps import LazyState, StepLog, WaitingQueue, rebuild_heap
from preemptscope.analysis.sim.workload import FloatArray, IntArray, Workload

# Fewer quiet lazy steps than this are cheaper one by one than with numpy.
QUIET_RUN_MIN = 8


class Batch(PrefixCache):
    """A simulation's state: per-request arrays, the running batch, the waiting queue, the log.

    The running batch is kept in running order as aligned arrays (slices [:nr]): request index,
    computed tokens, tokens to compute (prompt + generated), generated, output length, KV
    blocks held, first token produced. In lazy mode (LazyState) slots [:lz.slots] hold base
    values, true = base + lag, and finished entries stay in place until compacted.
    """

    def __init__(
        self,
        workload: Workload,
        config: SimConfig,
        until: float | None,
        record_tokens: bool,
        shortcuts: bool,
    ) -> None:
        self.workload = workload
        self.config = config
        self.cap = config.capacity()
        self.cost = cost_model(config)
        self.bs = config.block_size
        # Block 0 is the pool's null block (block_pool.py): it never holds KV.
        self.total_blocks = self.cap.num_gpu_blocks - 1
        self.free = self.total_blocks
        self.full_isl = config.scheduler_reserve_full_isl
        self.watermark_blocks = int(config.watermark * self.cap.num_gpu_blocks)
        self.caching = config.enable_prefix_caching
        # The free queue, as counts (docs/simulator.md): blocks ever appended to its tail, and
        # per preempted request the queue position of its freed blocks, their count and how
        # many were full (hashed). Allocation takes from the head, so a victim's blocks
        # survive until the head passes them; the head is in use + ever freed.
        self.freed_total = 0
        self.cached: dict[int, tuple[int, int, int]] = {}
        self.cache_hit_tokens = 0
        self.until = until
        self.record_tokens = record_tokens
        self.shortcuts = shortcuts
        self.policy_priority = config.scheduling_policy == "priority"
        self.chunked = config.enable_chunked_prefill
        self.max_seqs = config.max_num_seqs
        self.max_batched = config.max_num_batched_tokens
        # The smallest budget under which every budget decision of this run comes out the
        # same (max_batched + 1: the budget cut some request's tokens).
        self.budget_needed = 0

        n = self.n = len(workload)
        self.arrival = workload.arrival
        self.prio = workload.priority
        max_len = config.max_model_len
        self.prompt = np.minimum(workload.prompt_len, max_len - 1).astype(np.int64)
        self.target = np.minimum(workload.output_len, max_len - self.prompt).astype(np.int64)
        self.clamped = int(
            np.count_nonzero(
                (self.prompt != workload.prompt_len) | (self.target != workload.output_len)
            )
        )
        self.ntok = self.prompt.copy()  # prompt + generated: tokens a request must compute
        self.computed = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.first_sched = np.full(n, np.nan)
        self.first_tok = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.npre = np.zeros(n, dtype=np.int64)
        self.pre_t: list[float] = []
        self.pre_r: list[int] = []
        self.resumes: list[tuple[int, float]] = []
        self.tok_req: list[IntArray] = []
        self.tok_time: list[FloatArray] = []
        self.log = StepLog()
        self.waiting = WaitingQueue(config.scheduling_policy, self.prio, self.arrival)
        self.clock = 0.0
        self.next_arr = 0
        self.init_sharing(workload)

        # Lazy decode leaves finished entries in place until the next flush: headroom.
        size = self.size = max(4 * (self.max_seqs + 1), 256)
        self.r_id = np.zeros(size, dtype=np.int64)
        self.r_comp = np.zeros(size, dtype=np.int64)
        self.r_ntok = np.zeros(size, dtype=np.int64)
        self.r_gen = np.zeros(size, dtype=np.int64)
        self.r_tgt = np.zeros(size, dtype=np.int64)
        self.r_blk = np.zeros(size, dtype=np.int64)
        self.r_first = np.zeros(size, dtype=np.bool_)
        self.r_alive = np.zeros(size, dtype=np.bool_)  # lazy: entry still running
        self.r_join = np.zeros(size, dtype=np.int64)  # lazy: lazy step of its first token
        self.nr = 0
        self.lz = LazyState()
        # Lazy steps that stand for plain steps (lazy_step): no quiet runs meanwhile.
        self.plain_like = False

    # --- the batch and the per-request arrays --------------------------------------------

    def store(self) -> None:
        """Write the batch's state to the per-request arrays."""
        k = self.nr
        idx = self.r_id[:k]
        self.computed[idx] = self.r_comp[:k]
        self.ntok[idx] = self.r_ntok[:k]
        self.generated[idx] = self.r_gen[:k]
        self.blocks[idx] = self.r_blk[:k]

    def load(self, ids: list[int]) -> None:
        """Make the batch these requests, in this order, from the per-request arrays."""
        k = self.nr = len(ids)
        idx = np.asarray(ids, dtype=np.int64)
        self.r_id[:k] = idx
        self.r_comp[:k] = self.computed[idx]
        self.r_ntok[:k] = self.ntok[idx]
        self.r_gen[:k] = self.generated[idx]
        self.r_tgt[:k] = self.target[idx]
        self.r_blk[:k] = self.blocks[idx]
        self.r_first[:k] = ~np.isnan(self.first_tok[idx])

    def go_lazy(self) -> None:
        k, lz = self.nr, self.lz
        comp = self.r_comp[:k]
        lz.on, lz.lag, lz.slots, lz.alive = True, 0, k, k
        lz.ends = []
        lz.residues = np.bincount(comp % self.bs, minlength=self.bs).tolist()
        lz.ctx0 = int(np.add.reduce(comp))
        self.r_alive[:k] = True
        self.r_join[:k] = 1
        rebuild_heap(lz, self.r_tgt, self.r_gen, self.size)

    def record_lazy_tokens(self, slots: IntArray) -> None:
        """Tokens of these slots from their first lazy step through the current one."""
        joins = self.r_join[slots]
        lag, ends = self.lz.lag, self.lz.ends
        for j in np.unique(joins).tolist():
            ids = self.r_id[slots[joins == j]]
            count = lag - j + 1
            if count > 0:
                self.tok_req.append(np.tile(ids, count))
                self.tok_time.append(np.repeat(np.asarray(ends[j - 1 : lag]), len(ids)))

    def compact(self, apply_lag: bool) -> int:
        """Move the running entries to the front; with apply_lag, turn base into true values."""
        lz = self.lz
        alive = np.flatnonzero(self.r_alive[: lz.slots])
        k = len(alive)
        shift = lz.lag if apply_lag else 0
        if apply_lag and self.record_tokens and lz.lag:
            self.record_lazy_tokens(alive)
        for arr in (self.r_id, self.r_tgt, self.r_first, self.r_join):
            arr[:k] = arr[alive]
        for arr in (self.r_comp, self.r_ntok, self.r_gen):
            arr[:k] = arr[alive] + shift
        self.r_alive[:k] = True
        self.r_alive[k : lz.slots] = False
        return k

    def flush(self) -> None:
        """Leave lazy mode: true values in the arrays, blocks recomputed."""
        if not self.lz.on:
            return
        k = self.nr = self.compact(apply_lag=True)
        self.r_blk[:k] = -(-self.r_comp[:k] // self.bs)
        self.lz.on = self.plain_like = False
        self.lz.heap = []

    def lazy_step(self) -> bool:
        """One step of the lazy decode batch, or False (nothing done) when it cannot be one.

        Decoders all take one token; new requests whose whole prompt fits join as decoders;
        finished ones leave. O(1) per step plus O(1) per request event, with the same
        arithmetic as plain_step. A partial prefill or a block shortage returns False.
        """
        lz, bs, waiting, ntok = self.lz, self.bs, self.waiting, self.ntok
        lag0 = lz.lag
        dec = lz.alive
        free_left = self.free - lz.residues[-lag0 % bs]
        if free_left < 0:
            if self.policy_priority or self.record_tokens:
                return False
            self.lazy_preempt()
            return True
        budget_left = self.max_batched - dec
        picks: list[tuple[int, int, int]] = []  # (request, tokens computed now, cache hit)
        holds: list[tuple[int, Undo]] = []
        new_tokens = new_context = new_pairs = new_decodes = 0  # the picks' sums
        blocked = as_plain = False
        sharing = self.sharing
        while len(waiting) and budget_left > 0 and dec + len(picks) < self.max_seqs:
            r = waiting.peek()
            tokens = int(ntok[r])
            # vLLM looks up the prefix cache first and checks the budget with what is left
            # to compute (scheduler.py: num_tokens - num_computed_tokens): a resumed request
            # gets its own surviving blocks back. The hit is looked up where it can decide
            # something (a blocked head is checked every step).
            resumed = r in self.cached
            used = self.max_batched - budget_left + tokens  # the budget it needs, no hit
            held = 0
            if sharing:
                hit, held = self.lookup(r, free_left)
            else:
                hit = (
                    self.cache_hit(r, free_left)
                    if resumed and (tokens > budget_left or used > self.budget_needed)
                    else 0
                )
            if tokens - hit > budget_left:
                if self.chunked:  # a partial prefill is the plain step's
                    return self.give_back(picks, holds)
                break
            self.budget_needed = max(self.budget_needed, used - hit)
            nb = -(-tokens // bs) - held  # blocks running requests hold cost nothing
            wm = self.watermark_blocks if dec + len(picks) else 0
            if resumed:
                # The step stands for the plain step that resumes (or refuses) it and the
                # ones after it (see plain_like).
                if self.record_tokens:  # tokens in the plain step's order: take it
                    return self.give_back(picks, holds)
                as_plain = True
            if nb + wm > free_left:
                blocked = True
                break
            if resumed and not hit and not sharing:
                hit = self.cache_hit(r, free_left)
            waiting.pop()
            q = tokens - hit
            if sharing and self.group[r] >= 0:
                holds.append((r, self.hold(r, hit, q)))
            picks.append((r, q, hit))
            free_left -= nb
            budget_left -= q
            new_tokens += q
            new_context += tokens
            new_pairs += q * hit + q * (q + 1) // 2
            new_decodes += q == 1
        if as_plain:
            for r, _, hit in picks:
                if r in self.cached:
                    del self.cached[r]
                    self.cache_hit_tokens += hit
        if sharing:
            for r, _, hit in picks:
                self.shared_at_preempt.pop(r, None)
                if not self.npre[r]:
                    self.fresh_hits += hit

        n_tokens = dec + new_tokens
        dec_context = lz.ctx0 + dec * lag0 + dec
        context = dec_context + new_context
        decode_tokens = dec + new_decodes
        pairs = float(context) if decode_tokens == n_tokens else float(dec_context + new_pairs)
        clock = self.clock
        end = clock + self.cost.step_time(n_tokens, context, pairs, decode_tokens)
        free = free_left
        lag = lz.lag = lag0 + 1
        lz.ends.append(end)
        first_prompt = 0
        for r, q, hit in picks:
            first_prompt += self.join_lazy(r, q + hit, lag, clock, end)
        n_done = 0
        heap, size = lz.heap, self.size
        bound = (lag + 1) * size  # entries that finish at this lag or before
        alive = self.r_alive
        while heap and heap[0] < bound:
            slot = heapq.heappop(heap) % size
            if alive[slot]:  # not a preempted request's entry
                free += self.leave_lazy(slot, lag, end)
                n_done += 1
        self.free = free
        self.log.add(clock, end, lz.alive, len(waiting), self.total_blocks - free, n_tokens,
                     n_tokens - decode_tokens, first_prompt, dec + len(picks), 0, blocked,
                     n_done)  # fmt: skip
        self.clock = end
        if not lz.alive:
            self.flush()
        elif as_plain or self.plain_like:
            # plain_step would be running these steps (a resumed request took it there): it
            # stays there while it admits, and its first quiet step fast-forwards and goes
            # lazy again.
            self.plain_like = bool(picks)
            if not picks and not n_done:
                self.lazy_fast_forward(end - clock, blocked)
        return True

    def give_back(
        self,
        picks: list[tuple[int, int, int]],
        holds: list[tuple[int, Undo]],
    ) -> bool:
        """Undo a lazy step's admissions (it is the plain step's to take); returns False."""
        for req, undo in reversed(holds):
            self.unhold_pick(req, undo)
        for req, _, _ in reversed(picks):
            self.waiting.unpop(req)
        return False

    def lazy_preempt(self) -> None:
        """plain_step's preemption step (fcfs), on the lazy batch: the same victims and sums.

        Every running request decodes; those whose context fills its last block take one, in
        running order, and when none is free the last running request is preempted (its
        blocks freed) until one is, or it was the request itself. No admission follows, and
        the steps after it stand for plain steps (plain_like), as in plain_step.
        """
        lz, bs, clock = self.lz, self.bs, self.clock
        lag0 = lz.lag
        self.budget_needed = max(self.budget_needed, lz.alive)  # plain_step's total need
        slots = np.flatnonzero(self.r_alive[: lz.slots])  # running order
        comp = self.r_comp[slots] + lag0
        free, tail = self.free, len(slots)
        victims: list[int] = []
        for i in np.flatnonzero(comp % bs == 0).tolist():
            if i >= tail:
                break
            while free < 1:
                tail -= 1
                victims.append(tail)
                v_comp = int(comp[tail])
                free += self.on_preempt(int(self.r_id[slots[tail]]), -(-v_comp // bs), v_comp)
                if tail == i:
                    break
            if tail == i:
                break
            free -= 1
        for t in victims:  # the last running first, as vLLM pops them
            slot = int(slots[t])
            r = int(self.r_id[slot])
            base = int(self.r_comp[slot])
            self.ntok[r] = int(self.r_ntok[slot]) + lag0
            self.generated[r] = int(self.r_gen[slot]) + lag0
            self.computed[r] = 0
            self.blocks[r] = 0
            self.npre[r] += 1
            self.pre_t.append(clock)
            self.pre_r.append(r)
            self.waiting.prepend(r)
            lz.residues[base % bs] -= 1
            lz.ctx0 -= base
            lz.alive -= 1
            self.r_alive[slot] = False
        # The victims' finish entries stay in the heap, skipped when they come up.
        dec, preempted = lz.alive, len(victims)
        if not dec:  # everything was preempted: the next step re-admits from waiting
            self.free = free
            self.log.add(clock, clock, 0, len(self.waiting), self.total_blocks - free,
                         0, 0, 0, 0, preempted, False, 0)  # fmt: skip
            self.flush()
            return
        context = lz.ctx0 + dec * lag0 + dec
        end = clock + self.cost.step_time(dec, context, float(context), dec)
        lag = lz.lag = lag0 + 1
        lz.ends.append(end)
        n_done = 0
        heap, size, alive = lz.heap, self.size, self.r_alive
        while heap and heap[0] < (lag + 1) * size:
            slot = heapq.heappop(heap) % size
            if alive[slot]:
                free += self.leave_lazy(slot, lag, end)
                n_done += 1
        self.free = free
        self.log.add(clock, end, lz.alive, len(self.waiting), self.total_blocks - free, dec,
                     0, 0, dec, preempted, False, n_done)  # fmt: skip
        self.clock = end
        self.plain_like = True
        if not lz.alive:
            self.flush()

    def lazy_fast_forward(self, last_step: float, kv_blocked: bool) -> None:
        """fast_forward after a quiet plain step, on the lazy batch: the same steps and sums.

        The lazy step stood for a quiet plain step (see plain_like); plain_step would then
        fast-forward (`clock + cumsum`, not the lazy steps' running sums) and go lazy again.
        This does the same without leaving lazy mode: the batch's true context, next finish
        and block crossings come from the lazy state. Tokens are not recorded (lazy_step
        takes this path only without them).
        """
        lz, bs, nr, clock = self.lz, self.bs, self.lz.alive, self.clock
        if kv_blocked and self.head_hit_moves():
            return
        limit = self.until if self.until is not None else np.inf
        if self.next_arr < self.n:
            limit = min(limit, float(self.arrival[self.next_arr]))
        if limit - clock <= 3.0 * last_step:
            return
        lag = lz.lag
        context = float(lz.ctx0 + nr * lag)
        steps = self.next_finish() - lag - 1
        if steps < 1 or clock >= limit:
            return
        if np.isfinite(limit):
            first = float(self.cost.decode_step_times(nr, context, 1)[0])
            steps = min(steps, int((limit - clock) / first) + 1)
        times = self.cost.decode_step_times(nr, context, steps)
        ends = clock + np.cumsum(times)
        steps = int(np.searchsorted(ends - times, limit, side="left"))
        if steps < 1:
            return
        # fast_forward_decode's block count, its residues of (computed - 1) from lazy's.
        residue_counts = np.roll(np.asarray(lz.residues, dtype=np.int64), lag - 1)
        j = np.arange(1, steps + 1, dtype=np.int64)
        rho = np.arange(bs, dtype=np.int64)
        used_new = ((rho[None, :] + j[:, None]) // bs) @ residue_counts
        room = self.free - (self.kv_wait_floor(nr) if kv_blocked else 0)
        steps = min(steps, int(np.searchsorted(used_new, room, side="right")))
        if steps < 1:
            return
        ends, used_new = ends[:steps], used_new[:steps]
        self.log.add_decode_run(clock, ends, nr, len(self.waiting),
                                self.total_blocks - self.free + used_new, kv_blocked)  # fmt: skip
        lz.ends.extend(ends.tolist())
        lz.lag = lag + steps
        self.free -= int(used_new[-1])
        self.clock = float(ends[-1])
        if kv_blocked:
            self.blocked_head_budget(nr)

    def lazy_run(self) -> int:
        """The quiet lazy steps from now, at once; returns how many (0: none worth it).

        Quiet: the whole batch decodes and nothing else happens (no finish, no block
        shortage, no admission, no step at or after `until`) until the first finish, the
        first step whose blocks would not fit, or a step at or after the next arrival when
        that arrival could be admitted (an empty queue, or the priority heap's new head). A
        head that waits for blocks keeps waiting: blocks only get scarcer meanwhile. Each
        step is what lazy_step would compute: the same step times, the same sequential sums
        of end times (np.cumsum adds in order).
        """
        lz, bs = self.lz, self.bs
        lag0, dec = lz.lag, lz.alive
        steps = self.next_finish() - lag0 - 1  # before the first finish
        if steps < QUIET_RUN_MIN or self.plain_like:
            return 0
        waiting = self.waiting
        blocked, blocked_need = False, 0
        budget_left = self.max_batched - dec
        arrivals_count = budget_left > 0 and dec < self.max_seqs  # lazy_step looks at the head
        if arrivals_count and len(waiting):
            r = waiting.peek()
            tokens = int(self.ntok[r])
            free_left = self.free - lz.residues[-lag0 % bs]
            resumed = r in self.cached
            hit = held = 0
            if self.sharing and self.group[r] >= 0:
                if self.head_hit_moves():
                    return 0
                hit, held = self.lookup(r, free_left)  # the group is held throughout
            if tokens - hit > budget_left and (
                not resumed or tokens - self.cache_hit(r, free_left) > budget_left
            ):
                if self.chunked:
                    return 0  # a partial prefill: lazy_step refuses it
                # It waits for the budget throughout: its hit only shrinks as blocks go.
            else:
                if resumed:
                    return 0
                wm = self.watermark_blocks
                if -(-tokens // bs) - held + wm <= free_left:
                    return 0  # admitted in this step
                blocked, blocked_need = True, dec + tokens - hit  # each step checks it again
            arrivals_count = self.policy_priority  # a new arrival may become the head
        horizon = self.until if self.until is not None else np.inf
        if arrivals_count and self.next_arr < self.n:
            horizon = min(horizon, float(self.arrival[self.next_arr]))
        if horizon < np.inf:
            # Steps only lengthen (or stay), so the first one's time bounds how many start
            # before the horizon: a cheap way out before any numpy.
            context = lz.ctx0 + dec * lag0 + dec
            first = self.cost.step_time(dec, context, float(context), dec)
            steps = min(steps, int((horizon - self.clock) / first) + 2)
            if steps < QUIET_RUN_MIN:
                return 0
        residues = np.asarray(lz.residues, dtype=np.int64)
        need = residues[-(lag0 + np.arange(steps, dtype=np.int64)) % bs]
        used = np.cumsum(need)  # new blocks after each step
        steps = min(steps, int(np.searchsorted(used, self.free, side="right")))
        if steps < QUIET_RUN_MIN:
            return 0
        times = self.cost.decode_step_times(dec, float(lz.ctx0 + dec * lag0), steps)
        ends = np.cumsum(np.concatenate(([self.clock], times)))
        starts = ends[:-1]
        if self.until is not None:
            steps = min(steps, int(np.searchsorted(starts, self.until, side="left")))
        arrival, nxt = self.arrival, self.next_arr
        if arrivals_count and nxt < self.n:
            steps = min(steps, int(np.searchsorted(starts, arrival[nxt], side="left")))
        if steps < 1:
            return 0
        self.budget_needed = max(self.budget_needed, blocked_need)  # only if steps are taken
        starts, ends, used = starts[:steps], ends[1 : steps + 1], used[:steps]
        # Arrivals join the queue before the step that starts at or after them.
        joined = np.searchsorted(arrival, starts, side="right") - nxt
        self.log.add_decode_run(float(starts[0]), ends, dec, len(waiting) + joined,
                                self.total_blocks - self.free + used, blocked)  # fmt: skip
        for r in range(nxt, nxt + int(joined[-1])):
            waiting.add(r)
        self.next_arr = nxt + int(joined[-1])
        lz.ends.extend(ends.tolist())
        lz.lag = lag0 + steps
        self.free -= int(used[-1])
        self.clock = float(ends[-1])
        return steps

    def next_finish(self) -> int:
        """The lag at which the next running entry finishes (preempted entries dropped)."""
        heap, size, alive = self.lz.heap, self.size, self.r_alive
        while not alive[heap[0] % size]:
            heapq.heappop(heap)
        return heap[0] // size

    def join_lazy(self, r: int, tokens: int, lag: int, clock: float, end: float) -> int:
        """Admit request r, whose whole remaining prompt (`tokens`) runs in this lazy step.

        Returns its prompt length if this step gives it its first token, else 0.
        """
        lz = self.lz
        if lz.slots == self.size:
            lz.slots = self.compact(apply_lag=False)
            rebuild_heap(lz, self.r_tgt, self.r_gen, self.size)
        slot = lz.slots
        lz.slots += 1
        gen0 = int(self.generated[r])
        base = tokens - lag
        self.r_id[slot] = r
        self.r_comp[slot] = base
        self.r_ntok[slot] = tokens + 1 - lag
        self.r_gen[slot] = gen0 + 1 - lag
        self.r_tgt[slot] = self.target[r]
        self.r_first[slot] = True
        self.r_alive[slot] = True
        self.r_join[slot] = lag
        lz.residues[base % self.bs] += 1
        lz.ctx0 += base
        lz.alive += 1
        heapq.heappush(lz.heap, (int(self.target[r]) - gen0 - 1 + lag) * self.size + slot)
        self.mark_scheduled(r, clock)
        if np.isnan(self.first_tok[r]):
            self.first_tok[r] = end
            return int(self.prompt[r])
        return 0

    def leave_lazy(self, slot: int, lag: int, end: float) -> int:
        """Finish the request in this slot at `end`; returns the KV blocks it frees."""
        lz = self.lz
        r = int(self.r_id[slot])
        base = int(self.r_comp[slot])
        self.finish[r] = end
        self.computed[r] = base + lag
        self.ntok[r] = int(self.r_ntok[slot]) + lag
        self.generated[r] = int(self.r_gen[slot]) + lag
        self.blocks[r] = 0
        lz.residues[base % self.bs] -= 1
        lz.ctx0 -= base
        lz.alive -= 1
        self.r_alive[slot] = False
        if self.record_tokens:
            join = int(self.r_join[slot])
            self.tok_req.append(np.full(lag - join + 1, r, dtype=np.int64))
            self.tok_time.append(np.asarray(lz.ends[join - 1 : lag]))
        freed = -(-(base + lag) // self.bs)
        if self.sharing:
            return self.leave(r, freed, base + lag, False)
        self.release(freed)
        return freed

    def kv_wait_floor(self, running: int) -> int:
        """Free blocks below which the head of the queue, refused KV blocks now, would be
        refused for the budget instead (0: it never would).

        Without chunked prefill a resumed request is checked against the budget less its
        cache hit, and the hit shrinks as allocations pass its blocks in the free queue: a
        run of decode steps taken at once stops where the step's kv_blocked would turn.
        """
        if self.chunked or not self.cached or not len(self.waiting):
            return 0
        seg = self.cached.get(self.waiting.peek())
        if seg is None:
            return 0
        pos, count, _ = seg
        uncached = int(self.ntok[self.waiting.peek()]) - (self.max_batched - running)
        if uncached <= 0:
            return 0  # its whole sequence fits the budget, hit or not
        # cache_hit keeps >= ceil(uncached / bs) blocks while the queue's head
        # (total - free + freed_total) is at most pos + count minus them.
        kept = -(-uncached // self.bs)
        return max(self.total_blocks + self.freed_total - pos - count + kept, 0)

    def blocked_head_budget(self, running: int) -> None:
        """budget_needed as the plain steps of a decode run taken at once record it.

        Each of them checks the head of the queue, refused KV blocks, against the budget
        again; a resumed head's hit only shrinks meanwhile, so the last step needs the most
        (or, with chunked prefill, cuts it to a partial prefill).
        """
        r = self.waiting.peek()
        if r not in self.cached:
            return  # a fresh head needs the same tokens every step: already recorded
        if self.budget_needed > self.max_batched:
            return  # already more than any budget of this config
        budget = self.max_batched - running
        tokens = int(self.ntok[r])
        if tokens <= budget and self.max_batched - budget + tokens <= self.budget_needed:
            return  # no hit can need more
        tokens -= self.cache_hit(r, self.free)
        if tokens <= budget:
            self.budget_needed = max(self.budget_needed, self.max_batched - budget + tokens)
        elif self.chunked:
            self.budget_needed = self.max_batched + 1  # a partial prefill

    def mark_scheduled(self, r: int, clock: float) -> None:
        if np.isnan(self.first_sched[r]):
            self.first_sched[r] = clock
        elif self.npre[r]:
            self.resumes.append((r, clock))
