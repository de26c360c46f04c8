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

The step mechanics live in steps.py. Two shortcuts skip work while only token counts change
(fast-forward of quiet decode stretches, and a lazy decode batch accounted in O(1) per step and
per request event); both reproduce the plain loop exactly (`fast_forward=False`), which the
property tests check. An hour at 20 req/s takes about a CPU-second. Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from preemptscope.analysis.kvmodel import KVCapacity
from preemptscope.analysis.sim.config import SimConfig, StepCostModel
from preemptscope.analysis.sim.steps import (
    EMPTY,
    LazyState,
    StepLog,
    StepSeries,
    WaitingQueue,
    fast_forward_decode,
    mixed_step,
    rebuild_heap,
    resume_times,
    schedule_running,
)
from preemptscope.analysis.sim.workload import FloatArray, IntArray, Workload

from preemptscope.errors import ConfigError

__all__ = ["SimResult", "StepSeries", "simulate"]


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
    """Run the workload through the scheduler until every request finished (or `until` s)."""
    cap = config.capacity()
    cost = StepCostModel.from_config(config)
    bs = config.block_size
    free = cap.num_gpu_blocks
    n = len(workload)
    arrival = workload.arrival
    prio = workload.priority
    max_len = config.max_model_len
    prompt = np.minimum(workload.prompt_len, max_len - 1).astype(np.int64)
    target = np.minimum(workload.output_len, max_len - prompt).astype(np.int64)
    clamped = int(
        np.count_nonzero((prompt != workload.prompt_len) | (target != workload.output_len))
    )

    ntok = prompt.copy()  # prompt + generated: the tokens a request must have computed
    computed = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    blocks = np.zeros(n, dtype=np.int64)
    first_sched = np.full(n, np.nan)
    first_tok = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    npre = np.zeros(n, dtype=np.int64)
    pre_t: list[float] = []
    pre_r: list[int] = []
    resumes: list[tuple[int, float]] = []
    tok_req: list[IntArray] = []
    tok_time: list[FloatArray] = []

    log = StepLog()

    waiting = WaitingQueue(config.scheduling_policy, prio, arrival)
    clock = 0.0
    next_arr = 0
    policy_priority = config.scheduling_policy == "priority"
    chunked = config.enable_chunked_prefill
    max_seqs = config.max_num_seqs

    # The running batch, in running order, as aligned arrays (slices [:nr] are the batch):
    # request index, computed tokens, tokens to compute (prompt + generated), generated,
    # output length, KV blocks held, and whether the first token was produced.
    # Lazy decode leaves finished entries in place until the next flush, hence the headroom.
    size = max(4 * (max_seqs + 1), 256)
    r_id = np.zeros(size, dtype=np.int64)
    r_comp = np.zeros(size, dtype=np.int64)
    r_ntok = np.zeros(size, dtype=np.int64)
    r_gen = np.zeros(size, dtype=np.int64)
    r_tgt = np.zeros(size, dtype=np.int64)
    r_blk = np.zeros(size, dtype=np.int64)
    r_first = np.zeros(size, dtype=np.bool_)
    r_alive = np.zeros(size, dtype=np.bool_)  # lazy mode: entry still running
    r_join = np.zeros(size, dtype=np.int64)  # lazy mode: lazy step of the entry's first token
    nr = 0

    def store(k: int) -> None:
        idx = r_id[:k]
        computed[idx] = r_comp[:k]
        ntok[idx] = r_ntok[:k]
        generated[idx] = r_gen[:k]
        blocks[idx] = r_blk[:k]

    def load(ids: list[int]) -> int:
        k = len(ids)
        idx = np.asarray(ids, dtype=np.int64)
        r_id[:k] = idx
        r_comp[:k] = computed[idx]
        r_ntok[:k] = ntok[idx]
        r_gen[:k] = generated[idx]
        r_tgt[:k] = target[idx]
        r_blk[:k] = blocks[idx]
        r_first[:k] = ~np.isnan(first_tok[idx])
        return k

    # Lazy decode (see LazyState): while on, slots [:lz.slots] hold base values; true = base + lag.
    max_batched = config.max_num_batched_tokens
    lz = LazyState()

    def go_lazy(k: int) -> None:
        comp = r_comp[:k]
        lz.on, lz.lag, lz.slots, lz.alive = True, 0, k, k
        lz.ends = []
        lz.residues = np.bincount(comp % bs, minlength=bs).tolist()
        lz.ctx0 = int(np.add.reduce(comp))
        r_alive[:k] = True
        r_join[:k] = 1
        lz.heap = list(zip((r_tgt[:k] - r_gen[:k]).tolist(), range(k), strict=True))
        heapq.heapify(lz.heap)

    def record_lazy_tokens(slots: IntArray) -> None:
        """Tokens of these slots from their first lazy step through the current one."""
        joins = r_join[slots]
        for j in np.unique(joins).tolist():
            ids = r_id[slots[joins == j]]
            count = lz.lag - j + 1
            if count > 0:
                tok_req.append(np.tile(ids, count))
                tok_time.append(np.repeat(np.asarray(lz.ends[j - 1 : lz.lag]), len(ids)))

    def compact(apply_lag: bool) -> int:
        """Move the running entries to the front; with apply_lag, turn base into true values."""
        alive = np.flatnonzero(r_alive[: lz.slots])
        k = len(alive)
        shift = lz.lag if apply_lag else 0
        if apply_lag and record_tokens and lz.lag:
            record_lazy_tokens(alive)
        r_id[:k] = r_id[alive]
        r_comp[:k] = r_comp[alive] + shift
        r_ntok[:k] = r_ntok[alive] + shift
        r_gen[:k] = r_gen[alive] + shift
        r_tgt[:k] = r_tgt[alive]
        r_first[:k] = r_first[alive]
        r_join[:k] = r_join[alive]
        r_alive[:k] = True
        r_alive[k : lz.slots] = False
        return k

    def flush() -> int:
        """Leave lazy mode: true values in the arrays, blocks recomputed. Returns the batch size."""
        if not lz.on:
            return nr
        k = compact(apply_lag=True)
        r_blk[:k] = -(-r_comp[:k] // bs)
        lz.on = False
        lz.heap = []
        return k

    for _ in range(max_steps):
        while next_arr < n and arrival[next_arr] <= clock:
            waiting.add(next_arr)
            next_arr += 1
        if not nr and not len(waiting):
            if next_arr >= n:
                break
            clock = float(arrival[next_arr])
            continue
        if until is not None and clock >= until:
            break

        if lz.on:
            # Decoders all take one token; new requests whose whole prompt fits join as
            # decoders; finished ones leave. O(1) per step plus O(1) per request event, with
            # the same arithmetic as the plain loop. Anything else (a partial prefill, a block
            # shortage) flushes to the plain loop for this step.
            lag0 = lz.lag
            dec = lz.alive
            need_blocks = lz.residues[-lag0 % bs]
            free_left = free - need_blocks
            if free_left >= 0:
                budget_left = max_batched - dec
                picks: list[tuple[int, int]] = []
                blocked = abort = False
                while len(waiting) and budget_left > 0 and dec + len(picks) < max_seqs:
                    r = waiting.peek()
                    tokens = int(ntok[r])
                    if tokens > budget_left:
                        abort = chunked  # a partial prefill: the plain loop handles it
                        break
                    nb = -(-tokens // bs)
                    if nb > free_left:
                        blocked = True
                        break
                    waiting.pop()
                    picks.append((r, tokens))
                    free_left -= nb
                    budget_left -= tokens
                if abort:
                    for r, _ in reversed(picks):
                        waiting.unpop(r)
                else:
                    prompt_tokens = sum(t for _, t in picks)
                    ones = sum(1 for _, t in picks if t == 1)
                    n_tokens = dec + prompt_tokens
                    dec_context = lz.ctx0 + dec * lag0 + dec
                    context = dec_context + prompt_tokens
                    decode_tokens = dec + ones
                    if decode_tokens == n_tokens:
                        pairs = float(context)
                    else:
                        pairs = float(dec_context + sum(t * (t + 1) // 2 for _, t in picks))
                    end = clock + cost.step_time(n_tokens, context, pairs)
                    free = free_left
                    lag = lag0 + 1
                    lz.lag = lag
                    lz.ends.append(end)
                    first_prompt = 0
                    for r, tokens in picks:
                        if lz.slots == size:
                            lz.slots = compact(apply_lag=False)
                            rebuild_heap(lz, r_tgt, r_gen)
                        slot = lz.slots
                        lz.slots += 1
                        gen0 = int(generated[r])
                        base = tokens - lag
                        r_id[slot] = r
                        r_comp[slot] = base
                        r_ntok[slot] = tokens + 1 - lag
                        r_gen[slot] = gen0 + 1 - lag
                        r_tgt[slot] = target[r]
                        r_first[slot] = True
                        r_alive[slot] = True
                        r_join[slot] = lag
                        lz.residues[base % bs] += 1
                        lz.ctx0 += base
                        lz.alive += 1
                        heapq.heappush(lz.heap, (int(target[r]) - gen0 - 1 + lag, slot))
                        if np.isnan(first_sched[r]):
                            first_sched[r] = clock
                        elif npre[r]:
                            resumes.append((r, clock))
                        if np.isnan(first_tok[r]):
                            first_tok[r] = end
                            first_prompt += int(prompt[r])
                    n_done = 0
                    while lz.heap and lz.heap[0][0] <= lag:
                        _, slot = heapq.heappop(lz.heap)
                        r = int(r_id[slot])
                        base = int(r_comp[slot])
                        finish[r] = end
                        computed[r] = base + lag
                        ntok[r] = int(r_ntok[slot]) + lag
                        generated[r] = int(r_gen[slot]) + lag
                        blocks[r] = 0
                        free += -(-(base + lag) // bs)
                        lz.residues[base % bs] -= 1
                        lz.ctx0 -= base
                        lz.alive -= 1
                        r_alive[slot] = False
                        n_done += 1
                        if record_tokens:
                            join = int(r_join[slot])
                            tok_req.append(np.full(lag - join + 1, r, dtype=np.int64))
                            tok_time.append(np.asarray(lz.ends[join - 1 : lag]))
                    log.add(clock, end, lz.alive, len(waiting), cap.num_gpu_blocks - free,
                            n_tokens, n_tokens - decode_tokens, first_prompt, dec + len(picks),
                            0, blocked, n_done)  # fmt: skip
                    clock = end
                    if not lz.alive:
                        nr = flush()
                    continue
            nr = flush()

        budget = config.max_num_batched_tokens
        preempted = 0
        kv_blocked = False
        budget_limited = False
        q: IntArray = EMPTY
        need: IntArray = EMPTY
        all_decode = False
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
            else:
                budget_limited = True
                q = np.minimum(need, np.maximum(budget - (np.cumsum(need) - need), 0))
            new_blocks = -(-(comp + q) // bs)
            total_new = int(np.add.reduce(new_blocks)) - int(np.add.reduce(r_blk[:nr]))
            if total_new <= free:
                r_blk[:nr] = new_blocks
                free -= total_new
                budget -= int(np.add.reduce(q)) if budget_limited else total_need
            else:
                store(nr)
                running = r_id[:nr].tolist()
                sched, budget, free, preempted = schedule_running(
                    running, waiting, ntok, computed, blocks, prio, arrival,
                    npre, pre_t, pre_r, clock, budget, free, bs, policy_priority,
                )  # fmt: skip
                nr = load(running)
                q = np.fromiter((sched.get(r, 0) for r in running), dtype=np.int64, count=nr)
                need = r_ntok[:nr] - r_comp[:nr]
                budget_limited = True

        admitted_q: list[int] = []
        if not preempted:
            while len(waiting) and budget > 0 and nr < max_seqs:
                r = waiting.peek()
                tokens = int(ntok[r])  # waiting requests have computed nothing (recompute)
                if not chunked and tokens > budget:
                    break
                tokens = min(tokens, budget)
                nb = -(-tokens // bs)
                if nb > free:
                    kv_blocked = True
                    break
                waiting.pop()
                free -= nb
                budget -= tokens
                r_id[nr] = r
                r_comp[nr] = 0
                r_ntok[nr] = ntok[r]
                r_gen[nr] = generated[r]
                r_tgt[nr] = target[r]
                r_blk[nr] = nb
                r_first[nr] = not np.isnan(first_tok[r])
                nr += 1
                admitted_q.append(tokens)
                if np.isnan(first_sched[r]):
                    first_sched[r] = clock
                elif npre[r]:
                    resumes.append((r, clock))
        if admitted_q:
            k = len(admitted_q)
            q = np.concatenate([q, np.asarray(admitted_q, dtype=np.int64)])
            need = np.concatenate([need, r_ntok[nr - k : nr]])
            budget_limited = True  # q is no longer `need` for the admitted chunks

        if all_decode and not admitted_q:
            # Fast path of the common step: the same arithmetic as below, fewer array passes.
            comp = r_comp[:nr]
            context = int(np.add.reduce(comp)) + nr
            end = clock + cost.step_time(nr, context, float(context))
            comp += 1
            r_ntok[:nr] += 1
            gen_view = r_gen[:nr]
            gen_view += 1
            n_tokens = decode_tokens = n_prod = nr
            first_prompt = 0
            fresh = ~r_first[:nr]
            if fresh.any():  # a prefill whose last chunk was one token
                ids = r_id[:nr][fresh]
                first_tok[ids] = end
                first_prompt = int(np.add.reduce(prompt[ids]))
                r_first[:nr] = True
            if record_tokens:
                tok_req.append(r_id[:nr].copy())
                tok_time.append(np.full(nr, end))
            done = gen_view >= r_tgt[:nr]
            n_done = int(np.count_nonzero(done))
        else:
            n_tokens, decode_tokens, n_prod, first_prompt, n_done, end, done = mixed_step(
                nr, q, need, budget_limited, preempted, r_id, r_comp, r_ntok, r_gen, r_tgt,
                r_first, first_tok, prompt, cost, clock, record_tokens, tok_req, tok_time,
            )  # fmt: skip
            if n_tokens == 0:
                if preempted:
                    # Everything was preempted this step; the next step re-admits from waiting.
                    log.add(clock, clock, nr, len(waiting), cap.num_gpu_blocks - free,
                            0, 0, 0, 0, preempted, False, 0)  # fmt: skip
                    continue
                raise ConfigError(  # an invariant of the model, not a user error
                    f"simulator stalled at t={clock:.3f}s with {len(waiting)} waiting requests"
                )
        if n_done:
            ids = r_id[:nr][done]
            finish[ids] = end
            generated[ids] = r_gen[:nr][done]
            computed[ids] = r_comp[:nr][done]
            ntok[ids] = r_ntok[:nr][done]
            free += int(np.add.reduce(r_blk[:nr][done]))
            blocks[ids] = 0
            keep = ~done
            k = nr - n_done
            for arr in (r_id, r_comp, r_ntok, r_gen, r_tgt, r_blk, r_first):
                arr[:k] = arr[:nr][keep]
            nr = k

        log.add(clock, end, nr, len(waiting), cap.num_gpu_blocks - free, n_tokens,
                n_tokens - decode_tokens, first_prompt, n_prod, preempted, kv_blocked,
                n_done)  # fmt: skip
        clock = end

        if (
            fast_forward
            and not preempted
            and not admitted_q
            and not n_done
            and decode_tokens == n_tokens == nr
        ):
            # Nothing changes but token counts until the next arrival, completion or block
            # shortage: run those steps in one go (same arithmetic, step by step times).
            limit = until if until is not None else np.inf
            if next_arr < n:
                limit = min(limit, float(arrival[next_arr]))
            # Decode steps only get longer, so fewer than 3 fit before the limit when the gap
            # is under 3 of the last step: not worth the attempt.
            if limit - clock > 3.0 * (end - log.start[-1]):
                ff = fast_forward_decode(
                    nr, r_comp, r_gen, r_ntok, r_blk, r_tgt, cost, bs, free, clock, limit
                )
                if ff is not None:
                    ends_ff, used_new = ff
                    m = len(ends_ff)
                    free -= int(used_new[-1])
                    used_before = cap.num_gpu_blocks - free - int(used_new[-1])
                    log.add_decode_run(clock, ends_ff, nr, len(waiting), used_before + used_new,
                                       kv_blocked)  # fmt: skip
                    if record_tokens:
                        tok_req.append(np.tile(r_id[:nr], m))
                        tok_time.append(np.repeat(ends_ff, nr))
                    clock = float(ends_ff[-1])
        if fast_forward and all_decode and not admitted_q and nr:
            # The batch is decode-only and every request has its first token: go lazy.
            go_lazy(nr)
    else:
        raise ConfigError(f"simulation exceeded max_steps={max_steps}")
    nr = flush()
    store(nr)

    if record_tokens and tok_req:
        token_request = np.concatenate(tok_req).astype(np.int64)
        token_time = np.concatenate(tok_time)
    else:
        token_request = np.zeros(0, dtype=np.int64)
        token_time = np.zeros(0, dtype=np.float64)

    return SimResult(
        config=config,
        capacity=cap,
        workload=workload,
        prompt_len=prompt,
        output_len=target,
        steps=log.series(),
        first_scheduled=first_sched,
        first_token=first_tok,
        finish=finish,
        num_preemptions=npre,
        preempt_time=np.asarray(pre_t, dtype=np.float64),
        preempt_request=np.asarray(pre_r, dtype=np.int64),
        resume_time=resume_times(pre_r, resumes, n),
        token_request=token_request,
        token_time=token_time,
        end_time=clock,
        clamped_requests=clamped,
    )
