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

Per-step work is vectorised over the running batch (numpy), and only the preemption path walks
the batch in Python, so an hour at 20 req/s runs in seconds. Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from preemptscope.analysis.kvmodel import KVCapacity
from preemptscope.analysis.sim.config import SimConfig, StepCostModel
from preemptscope.analysis.sim.workload import FloatArray, IntArray, Workload

from preemptscope.errors import ConfigError


@dataclass(frozen=True)
class StepSeries:
    """One entry per engine step. Counts are after the step, as vLLM's scheduler stats."""

    start: FloatArray
    end: FloatArray
    running: IntArray
    waiting: IntArray
    used_blocks: IntArray
    scheduled_tokens: IntArray
    prefill_tokens: IntArray  # prompt (re)computation, recompute after preemption included
    first_token_prompt_tokens: IntArray  # prompts of requests that got their first token
    generation_tokens: IntArray
    preemptions: IntArray
    kv_blocked: npt.NDArray[np.bool_]  # a waiting request was refused for lack of KV blocks
    finished: IntArray

    def __len__(self) -> int:
        return len(self.end)


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


_EMPTY: IntArray = np.zeros(0, dtype=np.int64)


@dataclass
class _Lazy:
    """State of lazy decode: the batch advanced `lag` steps beyond the values in its arrays.

    residues[k]: running entries whose base computed tokens are k mod block_size (an entry
    needs a new block in the step where its context fills the last one); ctx0: their summed
    base computed tokens; heap: (lag at which an entry finishes, slot); ends: end time of
    each lazy step (for token times); slots: array entries in use, running or finished;
    alive: running entries.
    """

    on: bool = False
    lag: int = 0
    slots: int = 0
    alive: int = 0
    ctx0: int = 0
    residues: list[int] = field(default_factory=list)
    heap: list[tuple[int, int]] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)


def _rebuild_heap(lz: _Lazy, r_tgt: IntArray, r_gen: IntArray) -> None:
    k = lz.slots
    lz.heap = list(zip((r_tgt[:k] - r_gen[:k]).tolist(), range(k), strict=True))
    heapq.heapify(lz.heap)


class _Waiting:
    """vLLM's waiting queue: FIFO with front insertion (fcfs), or a (priority, arrival) heap."""

    def __init__(self, policy: str, priority: IntArray, arrival: FloatArray) -> None:
        self.fifo: deque[int] = deque()
        self.heap: list[tuple[int, float, int]] = []
        self.use_heap = policy == "priority"
        self.priority = priority
        self.arrival = arrival

    def __len__(self) -> int:
        return len(self.heap) if self.use_heap else len(self.fifo)

    def add(self, req: int) -> None:
        if self.use_heap:
            heapq.heappush(self.heap, (int(self.priority[req]), float(self.arrival[req]), req))
        else:
            self.fifo.append(req)

    def prepend(self, req: int) -> None:
        # A preempted request: FRONT of the FIFO; the heap re-sorts it by priority.
        if self.use_heap:
            self.add(req)
        else:
            self.fifo.appendleft(req)

    def unpop(self, req: int) -> None:
        """Undo pop(): back where it was (the head of the FIFO, or into the heap)."""
        if self.use_heap:
            self.add(req)
        else:
            self.fifo.appendleft(req)

    def peek(self) -> int:
        return self.heap[0][2] if self.use_heap else self.fifo[0]

    def pop(self) -> int:
        return heapq.heappop(self.heap)[2] if self.use_heap else self.fifo.popleft()


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

    s_start: list[float] = []
    s_end: list[float] = []
    s_run: list[int] = []
    s_wait: list[int] = []
    s_used: list[int] = []
    s_tok: list[int] = []
    s_pre_tok: list[int] = []
    s_first_prompt: list[int] = []
    s_gen: list[int] = []
    s_preempt: list[int] = []
    s_blocked: list[bool] = []
    s_fin: list[int] = []

    waiting = _Waiting(config.scheduling_policy, prio, arrival)
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

    # Lazy decode (see _Lazy): while on, slots [:lz.slots] hold base values; true = base + lag.
    max_batched = config.max_num_batched_tokens
    lz = _Lazy()

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
                            _rebuild_heap(lz, r_tgt, r_gen)
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
                    s_start.append(clock)
                    s_end.append(end)
                    s_run.append(lz.alive)
                    s_wait.append(len(waiting))
                    s_used.append(cap.num_gpu_blocks - free)
                    s_tok.append(n_tokens)
                    s_pre_tok.append(n_tokens - decode_tokens)
                    s_first_prompt.append(first_prompt)
                    s_gen.append(dec + len(picks))
                    s_preempt.append(0)
                    s_blocked.append(blocked)
                    s_fin.append(n_done)
                    clock = end
                    if not lz.alive:
                        nr = flush()
                    continue
            nr = flush()

        budget = config.max_num_batched_tokens
        preempted = 0
        kv_blocked = False
        budget_limited = False
        q: IntArray = _EMPTY
        need: IntArray = _EMPTY
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
                sched, budget, free, preempted = _schedule_running_with_preemption(
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
            n_tokens, decode_tokens, n_prod, first_prompt, n_done, end, done = _general_step(
                nr, q, need, budget_limited, preempted, r_id, r_comp, r_ntok, r_gen, r_tgt,
                r_first, first_tok, prompt, cost, clock, record_tokens, tok_req, tok_time,
            )  # fmt: skip
            if n_tokens == 0:
                if preempted:
                    # Everything was preempted this step; the next step re-admits from waiting.
                    _record_idle_step(s_start, s_end, s_run, s_wait, s_used, s_tok, s_pre_tok,
                                      s_first_prompt, s_gen, s_preempt, s_blocked, s_fin,
                                      clock, nr, len(waiting), cap.num_gpu_blocks - free,
                                      preempted)  # fmt: skip
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

        s_start.append(clock)
        s_end.append(end)
        s_run.append(nr)
        s_wait.append(len(waiting))
        s_used.append(cap.num_gpu_blocks - free)
        s_tok.append(n_tokens)
        s_pre_tok.append(n_tokens - decode_tokens)
        s_first_prompt.append(first_prompt)
        s_gen.append(n_prod)
        s_preempt.append(preempted)
        s_blocked.append(kv_blocked)
        s_fin.append(n_done)
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
            if limit - clock > 3.0 * (end - s_start[-1]):
                ff = _fast_forward(
                    nr, r_comp, r_gen, r_ntok, r_blk, r_tgt, cost, bs, free, clock, limit
                )
                if ff is not None:
                    ends_ff, used_new = ff
                    m = len(ends_ff)
                    free -= int(used_new[-1])
                    s_start.append(clock)
                    s_start.extend(ends_ff[:-1].tolist())
                    s_end.extend(ends_ff.tolist())
                    s_run.extend([nr] * m)
                    s_wait.extend([len(waiting)] * m)
                    used_before = cap.num_gpu_blocks - free - int(used_new[-1])
                    s_used.extend((used_before + used_new).tolist())
                    s_tok.extend([nr] * m)
                    s_pre_tok.extend([0] * m)
                    s_first_prompt.extend([0] * m)
                    s_gen.extend([nr] * m)
                    s_preempt.extend([0] * m)
                    s_blocked.extend([kv_blocked] * m)
                    s_fin.extend([0] * m)
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

    ends = np.asarray(s_end, dtype=np.float64)
    if record_tokens and tok_req:
        token_request = np.concatenate(tok_req).astype(np.int64)
        token_time = np.concatenate(tok_time)
    else:
        token_request = np.zeros(0, dtype=np.int64)
        token_time = np.zeros(0, dtype=np.float64)

    steps = StepSeries(
        start=np.asarray(s_start, dtype=np.float64),
        end=ends,
        running=np.asarray(s_run, dtype=np.int64),
        waiting=np.asarray(s_wait, dtype=np.int64),
        used_blocks=np.asarray(s_used, dtype=np.int64),
        scheduled_tokens=np.asarray(s_tok, dtype=np.int64),
        prefill_tokens=np.asarray(s_pre_tok, dtype=np.int64),
        first_token_prompt_tokens=np.asarray(s_first_prompt, dtype=np.int64),
        generation_tokens=np.asarray(s_gen, dtype=np.int64),
        preemptions=np.asarray(s_preempt, dtype=np.int64),
        kv_blocked=np.asarray(s_blocked, dtype=np.bool_),
        finished=np.asarray(s_fin, dtype=np.int64),
    )
    return SimResult(
        config=config,
        capacity=cap,
        workload=workload,
        prompt_len=prompt,
        output_len=target,
        steps=steps,
        first_scheduled=first_sched,
        first_token=first_tok,
        finish=finish,
        num_preemptions=npre,
        preempt_time=np.asarray(pre_t, dtype=np.float64),
        preempt_request=np.asarray(pre_r, dtype=np.int64),
        resume_time=_resume_times(pre_r, resumes, n),
        token_request=token_request,
        token_time=token_time,
        end_time=clock,
        clamped_requests=clamped,
    )


def _general_step(
    nr: int,
    q: IntArray,
    need: IntArray,
    budget_limited: bool,
    preempted: int,
    r_id: IntArray,
    r_comp: IntArray,
    r_ntok: IntArray,
    r_gen: IntArray,
    r_tgt: IntArray,
    r_first: npt.NDArray[np.bool_],
    first_tok: FloatArray,
    prompt: IntArray,
    cost: StepCostModel,
    clock: float,
    record_tokens: bool,
    tok_req: list[IntArray],
    tok_time: list[FloatArray],
) -> tuple[int, int, int, int, int, float, npt.NDArray[np.bool_]]:
    """Run one step with prefill chunks and decodes mixed; update the batch arrays.

    Returns (scheduled tokens, decode tokens, tokens produced, prompt tokens of requests that
    got their first token, finished requests, step end, mask of finished requests). Nothing is
    done when no token was scheduled (scheduled tokens 0).
    """
    n_tokens = int(np.add.reduce(q)) if nr else 0
    no_done = np.zeros(nr, dtype=np.bool_)
    if not n_tokens:
        return 0, 0, 0, 0, 0, clock, no_done
    comp = r_comp[:nr]
    after = comp + q
    context = int(np.add.reduce(after))
    if budget_limited:
        decode_tokens = int(np.count_nonzero((need == 1) & (q == 1)))
    else:
        decode_tokens = int(np.count_nonzero(need == 1))
    if decode_tokens == n_tokens:
        pairs = float(context)
    else:
        pairs = float(np.add.reduce(q * comp + q * (q + 1) // 2))
    end = clock + cost.step_time(n_tokens, context, pairs)

    ntok_view = r_ntok[:nr]
    produce = after == ntok_view
    r_comp[:nr] = after
    ntok_view += produce
    gen_view = r_gen[:nr]
    gen_view += produce
    n_prod = int(np.count_nonzero(produce))
    first_prompt = 0
    if not n_prod:
        return n_tokens, decode_tokens, 0, 0, 0, end, no_done
    fresh = produce & ~r_first[:nr]
    if fresh.any():
        ids = r_id[:nr][fresh]
        first_tok[ids] = end
        first_prompt = int(np.add.reduce(prompt[ids]))
        r_first[:nr] |= fresh
    if record_tokens:
        tok_req.append(r_id[:nr][produce])
        tok_time.append(np.full(n_prod, end))
    done = produce & (gen_view >= r_tgt[:nr])
    return n_tokens, decode_tokens, n_prod, first_prompt, int(np.count_nonzero(done)), end, done


def _resume_times(pre_r: list[int], resumes: list[tuple[int, float]], n: int) -> FloatArray:
    """Match each preemption to the victim's next re-admission, in order per request."""
    out = np.full(len(pre_r), np.nan)
    pending: dict[int, list[int]] = {}
    for k, r in enumerate(pre_r):
        pending.setdefault(r, []).append(k)
    cursor = dict.fromkeys(pending, 0)
    for r, t in resumes:
        ks = pending.get(r)
        if ks is not None and cursor[r] < len(ks):
            out[ks[cursor[r]]] = t
            cursor[r] += 1
    return out


def _fast_forward(
    nr: int,
    r_comp: IntArray,
    r_gen: IntArray,
    r_ntok: IntArray,
    r_blk: IntArray,
    r_tgt: IntArray,
    cost: StepCostModel,
    bs: int,
    free: int,
    clock: float,
    limit: float,
) -> tuple[FloatArray, IntArray] | None:
    """Advance a pure-decode batch by as many steps as provably change nothing else.

    Stops before: the first completion, the first step starting at or after `limit` (next
    arrival or end), and the first step whose new blocks would not fit. Mutates the batch
    arrays; returns (step end times, cumulative new blocks after each step) or None.
    """
    c = r_comp[:nr].copy()  # a copy: r_comp is updated below
    steps = int((r_tgt[:nr] - r_gen[:nr]).min()) - 1
    if steps < 1 or clock >= limit:
        return None
    if np.isfinite(limit):
        # Step times only grow (contexts lengthen), so the limit caps the count cheaply.
        first = float(cost.decode_step_times(nr, float(c.sum()), 1)[0])
        steps = min(steps, int((limit - clock) / first) + 1)
    times = cost.decode_step_times(nr, float(c.sum()), steps)
    ends = clock + np.cumsum(times)
    starts = ends - times
    steps = int(np.searchsorted(starts, limit, side="left"))
    if steps < 1:
        return None
    # New blocks after j steps: sum_i ceil((c_i + j) / bs) - blocks_i, via residue counts.
    base = int(np.add.reduce(-(-c // bs) - r_blk[:nr]))
    residue_counts = np.bincount((c - 1) % bs, minlength=bs)
    j = np.arange(1, steps + 1, dtype=np.int64)
    rho = np.arange(bs, dtype=np.int64)
    crossings = ((rho[None, :] + j[:, None]) // bs) @ residue_counts
    used_new = crossings - ((rho // bs) @ residue_counts) + base
    fits = int(np.searchsorted(used_new, free, side="right"))
    steps = min(steps, fits)
    if steps < 1:
        return None
    r_comp[:nr] = c + steps
    r_gen[:nr] += steps
    r_ntok[:nr] += steps
    r_blk[:nr] = -(-(c + steps) // bs)
    return ends[:steps], used_new[:steps]


def _schedule_running_with_preemption(
    running: list[int],
    waiting: _Waiting,
    ntok: IntArray,
    computed: IntArray,
    blocks: IntArray,
    prio: IntArray,
    arrival: FloatArray,
    npre: IntArray,
    pre_t: list[float],
    pre_r: list[int],
    clock: float,
    budget: int,
    free: int,
    bs: int,
    policy_priority: bool,
) -> tuple[dict[int, int], int, int, int]:
    """The running loop of vLLM's `Scheduler.schedule()` when blocks run short (V1 semantics)."""
    sched: dict[int, int] = {}
    preempted = 0
    index = 0
    while index < len(running) and budget > 0:
        req = running[index]
        tokens = min(int(ntok[req] - computed[req]), budget)
        if tokens == 0:
            index += 1
            continue
        scheduled = True
        while True:
            nb = -(-(int(computed[req]) + tokens) // bs) - int(blocks[req])
            if nb <= free:
                free -= nb
                blocks[req] += nb
                break
            if policy_priority:
                victim = max(running, key=lambda r: (int(prio[r]), float(arrival[r])))
                running.remove(victim)
                if victim in sched:
                    budget += sched.pop(victim)
                    index -= 1
            else:
                victim = running.pop()
            free += int(blocks[victim])
            blocks[victim] = 0
            computed[victim] = 0
            npre[victim] += 1
            pre_t.append(clock)
            pre_r.append(victim)
            waiting.prepend(victim)
            preempted += 1
            if victim == req:
                scheduled = False
                break
        if not scheduled:
            break
        sched[req] = tokens
        budget -= tokens
        index += 1
    return sched, budget, free, preempted


def _record_idle_step(
    s_start: list[float],
    s_end: list[float],
    s_run: list[int],
    s_wait: list[int],
    s_used: list[int],
    s_tok: list[int],
    s_pre_tok: list[int],
    s_first_prompt: list[int],
    s_gen: list[int],
    s_preempt: list[int],
    s_blocked: list[bool],
    s_fin: list[int],
    clock: float,
    running: int,
    waiting: int,
    used: int,
    preempted: int,
) -> None:
    s_start.append(clock)
    s_end.append(clock)
    s_run.append(running)
    s_wait.append(waiting)
    s_used.append(used)
    s_tok.append(0)
    s_pre_tok.append(0)
    s_first_prompt.append(0)
    s_gen.append(0)
    s_preempt.append(preempted)
    s_blocked.append(False)
    s_fin.append(0)
