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
from dataclasses import dataclass

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
    running: list[int] = []
    clock = 0.0
    next_arr = 0
    policy_priority = config.scheduling_policy == "priority"
    chunked = config.enable_chunked_prefill
    max_seqs = config.max_num_seqs

    for _ in range(max_steps):
        while next_arr < n and arrival[next_arr] <= clock:
            waiting.add(next_arr)
            next_arr += 1
        if not running and not len(waiting):
            if next_arr >= n:
                break
            clock = float(arrival[next_arr])
            continue
        if until is not None and clock >= until:
            break

        budget = config.max_num_batched_tokens
        preempted = 0
        kv_blocked = False
        # The scheduled batch: request index, tokens this step, computed tokens before it,
        # and tokens it still needed (== tokens scheduled when the step completes it).
        sched_idx: IntArray = _EMPTY
        sched_q: IntArray = _EMPTY
        sched_ctx: IntArray = _EMPTY
        sched_need: IntArray = _EMPTY
        if running:
            run = np.fromiter(running, dtype=np.int64, count=len(running))
            comp = computed[run]
            need = ntok[run] - comp
            total_need = int(np.add.reduce(need))
            if total_need <= budget:
                q = need
            else:
                q = np.minimum(need, np.maximum(budget - (np.cumsum(need) - need), 0))
            run_blocks = blocks[run]
            new_blocks = -(-(comp + q) // bs)
            total_new = int(np.add.reduce(new_blocks)) - int(np.add.reduce(run_blocks))
            if total_new <= free:
                blocks[run] = new_blocks
                free -= total_new
                if total_need <= budget:
                    sched_idx, sched_q, sched_ctx, sched_need = run, q, comp, need
                    budget -= total_need
                else:
                    mask = q > 0
                    sched_idx, sched_q = run[mask], q[mask]
                    sched_ctx, sched_need = comp[mask], need[mask]
                    budget -= int(np.add.reduce(sched_q))
            else:
                sched, budget, free, preempted = _schedule_running_with_preemption(
                    running, waiting, ntok, computed, blocks, prio, arrival,
                    npre, pre_t, pre_r, clock, budget, free, bs, policy_priority,
                )  # fmt: skip
                sched_idx = np.fromiter(sched.keys(), dtype=np.int64, count=len(sched))
                sched_q = np.fromiter(sched.values(), dtype=np.int64, count=len(sched))
                sched_ctx = computed[sched_idx]
                sched_need = ntok[sched_idx] - sched_ctx

        admitted: list[int] = []
        admitted_q: list[int] = []
        if not preempted:
            while len(waiting) and budget > 0 and len(running) < max_seqs:
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
                running.append(r)
                free -= nb
                blocks[r] = nb
                budget -= tokens
                admitted.append(r)
                admitted_q.append(tokens)
                if np.isnan(first_sched[r]):
                    first_sched[r] = clock
                elif npre[r]:
                    resumes.append((r, clock))
        if admitted:
            adm = np.asarray(admitted, dtype=np.int64)
            sched_idx = np.concatenate([sched_idx, adm])
            sched_q = np.concatenate([sched_q, np.asarray(admitted_q, dtype=np.int64)])
            sched_ctx = np.concatenate([sched_ctx, np.zeros(len(adm), dtype=np.int64)])
            sched_need = np.concatenate([sched_need, ntok[adm]])

        if not len(sched_idx):
            if preempted:
                # Everything was preempted this step; the next step re-admits from waiting.
                _record_idle_step(s_start, s_end, s_run, s_wait, s_used, s_tok, s_pre_tok,
                                  s_first_prompt, s_gen, s_preempt, s_blocked, s_fin, clock,
                                  len(running), len(waiting), cap.num_gpu_blocks - free,
                                  preempted)  # fmt: skip
                continue
            raise ConfigError(  # an invariant of the model, not a user error
                f"simulator stalled at t={clock:.3f}s with {len(waiting)} waiting requests"
            )

        n_tokens = int(np.add.reduce(sched_q))
        after = sched_ctx + sched_q
        context = int(np.add.reduce(after))
        decode_tokens = int(np.count_nonzero(sched_need == 1))
        if decode_tokens == len(sched_q):
            pairs = float(context)
        else:
            pairs = float(np.add.reduce(sched_q * sched_ctx + sched_q * (sched_q + 1) // 2))
        end = clock + cost.step_time(n_tokens, context, pairs)

        computed[sched_idx] = after
        produce = sched_idx[sched_q == sched_need]
        generated[produce] += 1
        ntok[produce] += 1
        new_first = produce[np.isnan(first_tok[produce])]
        if len(new_first):
            first_tok[new_first] = end
        done = produce[generated[produce] >= target[produce]]
        if len(done):
            finish[done] = end
            free += int(blocks[done].sum())
            blocks[done] = 0
            done_set = set(done.tolist())
            running = [r for r in running if r not in done_set]
        if record_tokens:
            tok_req.append(produce)
            tok_time.append(np.full(len(produce), end))

        s_start.append(clock)
        s_end.append(end)
        s_run.append(len(running))
        s_wait.append(len(waiting))
        s_used.append(cap.num_gpu_blocks - free)
        s_tok.append(n_tokens)
        s_pre_tok.append(n_tokens - decode_tokens)
        s_first_prompt.append(int(prompt[new_first].sum()))
        s_gen.append(len(produce))
        s_preempt.append(preempted)
        s_blocked.append(kv_blocked)
        s_fin.append(len(done))
        clock = end

        pure_decode = (
            not preempted
            and not admitted
            and not len(done)
            and decode_tokens == n_tokens
            and len(sched_idx) == len(running)
        )
        if pure_decode and fast_forward:
            # Nothing changes but token counts until the next arrival, completion or block
            # shortage: run those steps in one go (same arithmetic, step by step times).
            limit = until if until is not None else np.inf
            if next_arr < n:
                limit = min(limit, float(arrival[next_arr]))
            ff = _fast_forward(
                sched_idx, computed, generated, ntok, blocks, target, cost, bs, free, clock, limit
            )
            if ff is not None:
                ends_ff, used_new = ff
                m = len(ends_ff)
                free -= used_new[-1]
                d = len(sched_idx)
                s_start.append(clock)
                s_start.extend(ends_ff[:-1].tolist())
                s_end.extend(ends_ff.tolist())
                s_run.extend([len(running)] * m)
                s_wait.extend([len(waiting)] * m)
                s_used.extend((cap.num_gpu_blocks - free - used_new[-1] + used_new).tolist())
                s_tok.extend([d] * m)
                s_pre_tok.extend([0] * m)
                s_first_prompt.extend([0] * m)
                s_gen.extend([d] * m)
                s_preempt.extend([0] * m)
                s_blocked.extend([kv_blocked] * m)
                s_fin.extend([0] * m)
                if record_tokens:
                    tok_req.append(np.tile(sched_idx, m))
                    tok_time.append(np.repeat(ends_ff, d))
                clock = float(ends_ff[-1])
    else:
        raise ConfigError(f"simulation exceeded max_steps={max_steps}")

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
    run: IntArray,
    computed: IntArray,
    generated: IntArray,
    ntok: IntArray,
    blocks: IntArray,
    target: IntArray,
    cost: StepCostModel,
    bs: int,
    free: int,
    clock: float,
    limit: float,
) -> tuple[FloatArray, IntArray] | None:
    """Advance a pure-decode batch by as many steps as provably change nothing else.

    Stops before: the first completion, the first step starting at or after `limit` (next
    arrival or end), and the first step whose new blocks would not fit. Mutates the state
    arrays; returns (step end times, cumulative new blocks after each step) or None.
    """
    c = computed[run]
    steps = int((target[run] - generated[run]).min()) - 1
    if steps < 1:
        return None
    if clock >= limit:
        return None
    if np.isfinite(limit):
        # Step times only grow (contexts lengthen), so the limit caps the count cheaply.
        first = float(cost.decode_step_times(len(run), float(c.sum()), 1)[0])
        steps = min(steps, int((limit - clock) / first) + 1)
    times = cost.decode_step_times(len(run), float(c.sum()), steps)
    ends = clock + np.cumsum(times)
    starts = ends - times
    steps = int(np.searchsorted(starts, limit, side="left"))
    if steps < 1:
        return None
    # New blocks after j steps: sum_i ceil((c_i + j) / bs) - blocks_i, via residue counts.
    base = -(-c // bs) - blocks[run]
    residue_counts = np.bincount((c - 1) % bs, minlength=bs)
    j = np.arange(1, steps + 1, dtype=np.int64)
    rho = np.arange(bs, dtype=np.int64)
    crossings = ((rho[None, :] + j[:, None]) // bs) @ residue_counts
    used_new = crossings - ((rho // bs) @ residue_counts) + int(base.sum())
    fits = int(np.searchsorted(used_new, free, side="right"))
    steps = min(steps, fits)
    if steps < 1:
        return None
    computed[run] = c + steps
    generated[run] += steps
    ntok[run] += steps
    blocks[run] = -(-(c + steps) // bs)
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
