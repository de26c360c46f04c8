"""The discrete-event core: vLLM's V1 scheduler step by step, with recompute preemption.

One loop iteration is one engine step (`Scheduler.schedule()` + the model forward):

1. Arrivals up to now join the waiting queue.
2. Running requests, in order, get their next tokens (1 for decode, a prefill chunk otherwise)
   while the token budget (`max_num_batched_tokens`) lasts. A request whose new tokens need a
   KV block when none is free preempts a victim (the last running request under `fcfs`, the
   lowest priority then latest arrival under `priority`): its blocks are freed, its computed
   tokens reset to 0 (recompute), and it goes to the FRONT of the waiting queue.
3. If nothing was preempted, waiting requests are admitted in order while the budget,
   `max_num_seqs` and free blocks allow (chunked prefill: a partial prompt is fine).
4. The step takes roofline time; requests that computed all their tokens sample one.

With prefix caching, freed blocks stay cached in the free queue (a victim gets its own back)
and prefixes shared across requests (Workload.prefix_group) are shared blocks with reference
counts, as vLLM's KV cache manager keeps them (batch.py, "prefixes shared across requests").

The step mechanics live in steps.py, the state and the lazy decode batch in batch.py. The
shortcuts (a lazy decode batch accounted in O(1) per step and per request event, quiet runs
and fast-forward of decode stretches) reproduce the plain loop (`fast_forward=False`), which
the property tests check, and the engine before them bit for bit (tests/sim/test_golden.py).
An hour at 20 req/s takes about a CPU-second. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from preemptscope.analysis.kvmodel import KVCapacity
from preemptscope.analysis.sim.batch import QUIET_RUN_MIN, Batch
from preemptscope.analysis.sim.config import FittedStepCost, SimConfig, cost_model
from preemptscope.analysis.sim.steps import (
    EMPTY,
    StepSeries,
    fast_forward_decode,
    mixed_step,
    resume_times,
    schedule_running,
)
from preemptscope.analysis.sim.workload import FloatArray, IntArray, Workload

from preemptscope.errors import ConfigError

__all__ = ["SimResult", "StepSeries", "engine_key", "simulate"]


@dataclass(frozen=True)
class SimResult:
    config: SimConfig
    capacity: KVCapacity
    workload: Workload
    prompt_len: IntArray  # after clamping to max_model_len
    output_len: IntArray
    steps: StepSeries
    first_scheduled: FloatArray  # NaN: never scheduled
    first_token: FloatArray
    finish: FloatArray  # NaN: not finished when the simulation stopped
    num_preemptions: IntArray  # per request
    preempt_time: FloatArray  # one entry per preemption, in order
    preempt_request: IntArray
    resume_time: FloatArray  # per preemption: when the victim was scheduled again (NaN: never)
    token_request: IntArray  # one entry per output token (empty unless record_tokens)
    token_time: FloatArray
    end_time: float
    clamped_requests: int  # requests shortened to fit max_model_len
    # Any max_num_batched_tokens from this up to the config's gives this very run (every
    # budget decision the same); above the config's value: the budget cut something short.
    budget_needed: int = 0
    # vLLM's prefix-cache counters (prefix_cache_queries/hits_total): prompt tokens of first
    # admissions and the tokens of theirs found cached (None: prefix caching off).
    prefix_cache_queries: int | None = None
    prefix_cache_hits: int | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def total_preemptions(self) -> int:
        return len(self.preempt_time)

    @property
    def finished_mask(self) -> npt.NDArray[np.bool_]:
        mask: npt.NDArray[np.bool_] = ~np.isnan(self.finish)
        return mask

    def e2e(self) -> FloatArray:
        """End-to-end latency of finished requests, in request order."""
        done = self.finished_mask
        out: FloatArray = self.finish[done] - self.workload.arrival[done]
        return out

    def ttft(self) -> FloatArray:
        done = ~np.isnan(self.first_token)
        out: FloatArray = self.first_token[done] - self.workload.arrival[done]
        return out

    def itls(self) -> tuple[IntArray, FloatArray, FloatArray]:
        """(request index, token time, gap to the previous token) for each token but the first."""
        if not len(self.token_request):
            empty_i: IntArray = np.zeros(0, dtype=np.int64)
            empty_f: FloatArray = np.zeros(0, dtype=np.float64)
            return empty_i, empty_f, empty_f
        order = np.argsort(self.token_request, kind="stable")
        req = self.token_request[order]
        times = self.token_time[order]
        same = req[1:] == req[:-1]
        gaps = (times[1:] - times[:-1])[same]
        return req[1:][same], times[1:][same], gaps

    def output_throughput(self) -> float:
        """Generated tokens per second over the simulated span."""
        span = self.end_time - (float(self.workload.arrival[0]) if len(self.workload) else 0.0)
        return float(self.steps.generation_tokens.sum()) / span if span > 0 else 0.0


def simulate(
    workload: Workload,
    config: SimConfig,
    *,
    until: float | None = None,
    record_tokens: bool = True,
    fast_forward: bool = True,
    max_steps: int = 50_000_000,
) -> SimResult:
    """Run the workload through the scheduler until every request finished (or `until` s).

    fast_forward=False turns both shortcuts off (the plain step-by-step loop, for checking).
    """
    return _Run(workload, config, until, record_tokens, fast_forward).run(max_steps)


def engine_key(config: SimConfig) -> tuple[Any, ...]:
    """Everything `simulate` reads from a config: equal keys give identical runs.

    Two settings that differ only where the engine cannot see it (tensor or pipeline
    parallelism over the same GPUs and blocks, a fit's description) share one key.
    """
    cost = cost_model(config)
    cost_key: Any = (
        (
            cost.per_step_s,
            cost.per_prefill_token_s,
            cost.per_decode_token_s,
            cost.per_context_token_s,
        )
        if isinstance(cost, FittedStepCost)
        else cost
    )
    return (
        config.capacity().num_gpu_blocks,
        cost_key,
        config.block_size,
        config.max_model_len,
        config.max_num_seqs,
        config.max_num_batched_tokens,
        config.scheduling_policy,
        config.enable_chunked_prefill,
        config.scheduler_reserve_full_isl,
        config.watermark,
        config.enable_prefix_caching,
    )


class _Run(Batch):
    """One simulation: the loop, the plain step (vLLM's running loop, then the waiting loop),
    the fast-forward after a quiet plain step, and the result. State and lazy steps: Batch."""

    # --- the loop ----------------------------------------------------------------------

    def run(self, max_steps: int) -> SimResult:
        arrival, waiting, n = self.arrival, self.waiting, self.n
        done = 0  # loop iterations, a quiet lazy run counting one per step
        while True:
            if done >= max_steps:
                raise ConfigError(f"simulation exceeded max_steps={max_steps}")
            done += 1
            while self.next_arr < n and arrival[self.next_arr] <= self.clock:
                waiting.add(self.next_arr)
                self.next_arr += 1
            if not self.nr and not len(waiting):
                if self.next_arr >= n:
                    break
                self.clock = float(arrival[self.next_arr])
                continue
            if self.until is not None and self.clock >= self.until:
                break
            lz = self.lz
            if lz.on:
                # A quiet run needs QUIET_RUN_MIN steps before the next finish: cheap to ask.
                quiet = (
                    self.lazy_run()
                    if lz.heap and lz.heap[0] // self.size - lz.lag > QUIET_RUN_MIN
                    else 0
                )
                if quiet:
                    done += quiet - 1
                    continue
                if self.lazy_step():
                    continue
                self.flush()
            self.plain_step()
        self.flush()
        self.store()
        return self.result()

    def plain_step(self) -> None:
        """One engine step the general way (vLLM's running loop, then the waiting loop)."""
        bs, waiting, cost, clock = self.bs, self.waiting, self.cost, self.clock
        r_id, r_comp, r_ntok, r_gen = self.r_id, self.r_comp, self.r_ntok, self.r_gen
        r_tgt, r_blk, r_first = self.r_tgt, self.r_blk, self.r_first
        nr, free = self.nr, self.free
        budget = self.max_batched
        preempted = 0
        kv_blocked = False
        budget_limited = False
        q: IntArray = EMPTY
        need: IntArray = EMPTY
        all_decode = False
        total_need = 0
        if nr:
            comp = r_comp[:nr]
            need = r_ntok[:nr] - comp
            total_need = int(np.add.reduce(need))
            if total_need == nr:
                # Every running request decodes one token (the common step): it needs a new
                # block exactly when its context fills its last one.
                crossing = comp % bs == 0
                total_new = int(np.count_nonzero(crossing))
                if total_new <= free:
                    all_decode = True
                    free -= total_new
                    budget -= nr
                    r_blk[:nr] += crossing
                    q = need
        if nr and not all_decode:
            comp = r_comp[:nr]
            if total_need <= budget:
                q = need
                self.budget_needed = max(self.budget_needed, total_need)
            else:
                budget_limited = True
                self.budget_needed = self.max_batched + 1  # the budget cut a request short
                q = np.minimum(need, np.maximum(budget - (np.cumsum(need) - need), 0))
            new_blocks = -(-(comp + q) // bs)
            total_new = int(np.add.reduce(new_blocks)) - int(np.add.reduce(r_blk[:nr]))
            if total_new <= free:
                r_blk[:nr] = new_blocks
                free -= total_new
                budget -= int(np.add.reduce(q)) if budget_limited else total_need
            elif not self.policy_priority:
                nr, free, preempted = self.preempt_fcfs(new_blocks, q, free, clock)
                q = q[:nr]  # the survivors' tokens (0 where the budget ran out)
                budget -= int(np.add.reduce(q))
                need = r_ntok[:nr] - r_comp[:nr]
                budget_limited = True
            else:
                self.store()
                running = r_id[:nr].tolist()
                sched, budget, free, preempted = schedule_running(
                    running, waiting, self.ntok, self.computed, self.blocks, self.prio,
                    self.arrival, self.npre, self.pre_t, self.pre_r, clock, budget, free, bs,
                    self.policy_priority, self.on_preempt,
                )  # fmt: skip
                self.load(running)
                nr = self.nr
                q = np.fromiter((sched.get(r, 0) for r in running), dtype=np.int64, count=nr)
                need = r_ntok[:nr] - r_comp[:nr]
                budget_limited = True

        admitted_q: list[int] = []
        if not preempted:
            while len(waiting) and budget > 0 and nr < self.max_seqs:
                r = waiting.peek()
                held = 0
                if self.sharing:
                    hit, held = self.lookup(r, free)
                else:
                    hit = self.cache_hit(r, free) if r in self.cached else 0
                tokens = int(self.ntok[r]) - hit  # a waiting request computed only its hit
                if not self.chunked and tokens > budget:
                    break
                if tokens > budget:
                    self.budget_needed = self.max_batched + 1  # a partial prefill
                    tokens = budget
                else:
                    self.budget_needed = max(self.budget_needed, self.max_batched - budget + tokens)
                # The hit's blocks leave the free queue too; blocks that running requests
                # hold (a shared prefix) cost nothing.
                nb = -(-(hit + tokens) // bs) - held
                # Whole-sequence admission (vLLM >= 0.19): blocks for all its tokens.
                gate = -(-int(self.ntok[r]) // bs) - held if self.full_isl else nb
                if gate + (self.watermark_blocks if nr else 0) > free:
                    kv_blocked = True
                    break
                waiting.pop()
                if hit or r in self.cached:
                    self.cached.pop(r, None)
                    self.cache_hit_tokens += hit
                if self.sharing:
                    self.shared_at_preempt.pop(r, None)
                    if self.group[r] >= 0:
                        self.hold(r, hit, tokens)
                    if not self.npre[r]:
                        self.fresh_hits += hit
                free -= nb
                budget -= tokens
                r_id[nr] = r
                r_comp[nr] = hit
                r_ntok[nr] = self.ntok[r]
                r_gen[nr] = self.generated[r]
                r_tgt[nr] = self.target[r]
                r_blk[nr] = nb + held  # all its blocks, shared ones included
                r_first[nr] = not np.isnan(self.first_tok[r])
                nr += 1
                admitted_q.append(tokens)
                self.mark_scheduled(r, clock)
        if admitted_q:
            k = len(admitted_q)
            q = np.concatenate([q, np.asarray(admitted_q, dtype=np.int64)])
            need = np.concatenate([need, r_ntok[nr - k : nr] - r_comp[nr - k : nr]])
            budget_limited = True  # q is no longer `need` for the admitted chunks

        if all_decode and not admitted_q:
            # Fast path of the common step: the same arithmetic as below, fewer array passes.
            comp = r_comp[:nr]
            context = int(np.add.reduce(comp)) + nr
            end = clock + cost.step_time(nr, context, float(context), nr)
            comp += 1
            r_ntok[:nr] += 1
            gen_view = r_gen[:nr]
            gen_view += 1
            n_tokens = decode_tokens = n_prod = nr
            first_prompt = 0
            fresh = ~r_first[:nr]
            if fresh.any():  # a prefill whose last chunk was one token
                ids = r_id[:nr][fresh]
                self.first_tok[ids] = end
                first_prompt = int(np.add.reduce(self.prompt[ids]))
                r_first[:nr] = True
            if self.record_tokens:
                self.tok_req.append(r_id[:nr].copy())
                self.tok_time.append(np.full(nr, end))
            done = gen_view >= r_tgt[:nr]
            n_done = int(np.count_nonzero(done))
        else:
            n_tokens, decode_tokens, n_prod, first_prompt, n_done, end, done = mixed_step(
                nr, q, need, budget_limited, preempted, r_id, r_comp, r_ntok, r_gen, r_tgt,
                r_first, self.first_tok, self.prompt, cost, clock, self.record_tokens,
                self.tok_req, self.tok_time,
            )  # fmt: skip
            if n_tokens == 0:
                if not preempted:
                    raise ConfigError(  # an invariant of the model, not a user error
                        f"simulator stalled at t={clock:.3f}s with {len(waiting)} waiting"
                    )
                # Everything was preempted this step; the next step re-admits from waiting.
                self.nr, self.free = nr, free
                self.log.add(clock, clock, nr, len(waiting), self.total_blocks - free,
                             0, 0, 0, 0, preempted, False, 0)  # fmt: skip
                return
        if n_done:
            ids = r_id[:nr][done]
            self.finish[ids] = end
            self.generated[ids] = r_gen[:nr][done]
            self.computed[ids] = r_comp[:nr][done]
            self.ntok[ids] = r_ntok[:nr][done]
            if self.sharing:
                freed = 0
                for i, b, c in zip(ids.tolist(), r_blk[:nr][done].tolist(),
                                   r_comp[:nr][done].tolist(), strict=True):  # fmt: skip
                    freed += self.leave(i, b, c, False)
            else:
                freed = int(np.add.reduce(r_blk[:nr][done]))
                self.release(freed)
            free += freed
            self.blocks[ids] = 0
            keep = ~done
            k = nr - n_done
            for arr in (r_id, r_comp, r_ntok, r_gen, r_tgt, r_blk, r_first):
                arr[:k] = arr[:nr][keep]
            nr = k

        self.log.add(clock, end, nr, len(waiting), self.total_blocks - free, n_tokens,
                     n_tokens - decode_tokens, first_prompt, n_prod, preempted, kv_blocked,
                     n_done)  # fmt: skip
        self.nr, self.free, self.clock = nr, free, end
        quiet = not preempted and not admitted_q
        if self.shortcuts and quiet and not n_done and decode_tokens == n_tokens == nr:
            self.fast_forward(end - clock, kv_blocked)
        if self.shortcuts and quiet and all_decode and nr:
            # The batch is decode-only and every request has its first token: go lazy.
            self.go_lazy()

    def preempt_fcfs(
        self, new_blocks: IntArray, q: IntArray, free: int, clock: float
    ) -> tuple[int, int, int]:
        """schedule_running for fcfs, on the batch arrays: the same decisions, fewer objects.

        Requests take their blocks in running order; when one does not fit, the last running
        request is preempted until it does (or it was the last one itself). Only requests that
        need a new block can run short, so only they are walked. Returns (running after, free
        blocks, preemptions); the running are a prefix of the batch.
        """
        tail = self.nr
        r_blk = self.r_blk
        granted = int(np.count_nonzero(q))  # a prefix: the budget ran out after it
        more = new_blocks[:granted] - r_blk[:granted]
        victims: list[int] = []
        for i in np.flatnonzero(more).tolist():
            if i >= tail:
                break  # preempted already: the loop has run out of requests
            wanted = int(more[i])
            while wanted > free:
                tail -= 1
                victims.append(tail)
                free += self.on_preempt(int(self.r_id[tail]), int(r_blk[tail]),
                                        int(self.r_comp[tail]))  # fmt: skip
                if tail == i:
                    break
            if tail == i:
                break
            free -= wanted
        scheduled = min(granted, tail)
        r_blk[:scheduled] = new_blocks[:scheduled]
        for slot in victims:  # in the order vLLM pops them: the last running first
            victim = int(self.r_id[slot])
            self.ntok[victim] = self.r_ntok[slot]
            self.generated[victim] = self.r_gen[slot]
            self.computed[victim] = 0
            self.blocks[victim] = 0
            self.npre[victim] += 1
            self.pre_t.append(clock)
            self.pre_r.append(victim)
            self.waiting.prepend(victim)
        self.nr = tail
        return tail, free, len(victims)

    def fast_forward(self, last_step: float, kv_blocked: bool) -> None:
        """Run the quiet decode steps before the next arrival, completion or block shortage.

        Same arithmetic as step by step, in one numpy pass.
        """
        clock, nr = self.clock, self.nr
        if kv_blocked and self.head_hit_moves():
            return
        limit = self.until if self.until is not None else np.inf
        if self.next_arr < self.n:
            limit = min(limit, float(self.arrival[self.next_arr]))
        # Decode steps only get longer, so fewer than 3 fit before the limit when the gap is
        # under 3 of the last step: not worth the attempt.
        if limit - clock <= 3.0 * last_step:
            return
        room = self.free - (self.kv_wait_floor(nr) if kv_blocked else 0)
        ff = fast_forward_decode(
            nr, self.r_comp, self.r_gen, self.r_ntok, self.r_blk, self.r_tgt, self.cost,
            self.bs, room, clock, limit,
        )  # fmt: skip
        if ff is None:
            return
        ends, used_new = ff
        self.free -= int(used_new[-1])
        used_before = self.total_blocks - self.free - int(used_new[-1])
        self.log.add_decode_run(clock, ends, nr, len(self.waiting), used_before + used_new,
                                kv_blocked)  # fmt: skip
        if self.record_tokens:
            self.tok_req.append(np.tile(self.r_id[:nr], len(ends)))
            self.tok_time.append(np.repeat(ends, nr))
        self.clock = float(ends[-1])
        if kv_blocked:
            self.blocked_head_budget(nr)

    def result(self) -> SimResult:
        if self.record_tokens and self.tok_req:
            token_request = np.concatenate(self.tok_req).astype(np.int64)
            token_time = np.concatenate(self.tok_time)
        else:
            token_request = np.zeros(0, dtype=np.int64)
            token_time = np.zeros(0, dtype=np.float64)
        return SimResult(
            config=self.config,
            capacity=self.cap,
            workload=self.workload,
            prompt_len=self.prompt,
            output_len=self.target,
            steps=self.log.series(),
            first_scheduled=self.first_sched,
            first_token=self.first_tok,
            finish=self.finish,
            num_preemptions=self.npre,
            preempt_time=np.asarray(self.pre_t, dtype=np.float64),
            preempt_request=np.asarray(self.pre_r, dtype=np.int64),
            resume_time=resume_times(self.pre_r, self.resumes, self.n),
            token_request=token_request,
            token_time=token_time,
            end_time=self.clock,
            clamped_requests=self.clamped,
            budget_needed=self.budget_needed,
            prefix_cache_queries=(
                int(self.prompt[~np.isnan(self.first_sched)].sum()) if self.caching else None
            ),
            prefix_cache_hits=self.fresh_hits if self.caching else None,
        )
