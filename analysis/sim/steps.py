"""The scheduler's step mechanics, used by engine.simulate: the waiting queue, the running loop
with preemption, mixed prefill/decode steps, and the two shortcuts (fast-forward, lazy decode).

Pure numpy and Python; no I/O.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from preemptscope.analysis.sim.config import FittedStepCost, StepCostModel
from preemptscope.analysis.sim.workload import FloatArray, IntArray


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


class StepLog:
    """Per-step scheduler stats, appended as the engine runs; `series()` freezes them."""

    def __init__(self) -> None:
        self.start: list[float] = []
        self.end: list[float] = []
        self.running: list[int] = []
        self.waiting: list[int] = []
        self.used: list[int] = []
        self.tokens: list[int] = []
        self.prefill: list[int] = []
        self.first_prompt: list[int] = []
        self.generation: list[int] = []
        self.preemptions: list[int] = []
        self.blocked: list[bool] = []
        self.finished: list[int] = []

    def add(
        self,
        start: float,
        end: float,
        running: int,
        waiting: int,
        used: int,
        tokens: int,
        prefill: int,
        first_prompt: int,
        generation: int,
        preemptions: int,
        blocked: bool,
        finished: int,
    ) -> None:
        self.start.append(start)
        self.end.append(end)
        self.running.append(running)
        self.waiting.append(waiting)
        self.used.append(used)
        self.tokens.append(tokens)
        self.prefill.append(prefill)
        self.first_prompt.append(first_prompt)
        self.generation.append(generation)
        self.preemptions.append(preemptions)
        self.blocked.append(blocked)
        self.finished.append(finished)

    def add_decode_run(
        self,
        start: float,
        ends: FloatArray,
        batch: int,
        waiting: int | IntArray,
        used: IntArray,
        blocked: bool,
    ) -> None:
        """Consecutive decode steps of one unchanged batch (fast-forward, quiet lazy steps)."""
        m = len(ends)
        self.start.append(start)
        self.start.extend(ends[:-1].tolist())
        self.end.extend(ends.tolist())
        self.running.extend([batch] * m)
        self.waiting.extend([waiting] * m if isinstance(waiting, int) else waiting.tolist())
        self.used.extend(used.tolist())
        self.tokens.extend([batch] * m)
        self.prefill.extend([0] * m)
        self.first_prompt.extend([0] * m)
        self.generation.extend([batch] * m)
        self.preemptions.extend([0] * m)
        self.blocked.extend([blocked] * m)
        self.finished.extend([0] * m)

    def series(self) -> StepSeries:
        def ints(values: list[int]) -> IntArray:
            return np.asarray(values, dtype=np.int64)

        return StepSeries(
            start=np.asarray(self.start, dtype=np.float64),
            end=np.asarray(self.end, dtype=np.float64),
            running=ints(self.running),
            waiting=ints(self.waiting),
            used_blocks=ints(self.used),
            scheduled_tokens=ints(self.tokens),
            prefill_tokens=ints(self.prefill),
            first_token_prompt_tokens=ints(self.first_prompt),
            generation_tokens=ints(self.generation),
            preemptions=ints(self.preemptions),
            kv_blocked=np.asarray(self.blocked, dtype=np.bool_),
            finished=ints(self.finished),
        )


EMPTY: IntArray = np.zeros(0, dtype=np.int64)


@dataclass
class LazyState:
    """State of lazy decode: the batch advanced `lag` steps beyond the values in its arrays.

    residues[k]: running entries whose base computed tokens are k mod block_size (an entry
    needs a new block in the step where its context fills the last one); ctx0: their summed
    base computed tokens; heap: lag at which an entry finishes x array size + its slot (one
    int per entry: cheaper to push, pop and build than a tuple); ends: end time of
    each lazy step (for token times); slots: array entries in use, running or finished;
    alive: running entries.
    """

    on: bool = False
    lag: int = 0
    slots: int = 0
    alive: int = 0
    ctx0: int = 0
    residues: list[int] = field(default_factory=list)
    heap: list[int] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)


def rebuild_heap(lz: LazyState, r_tgt: IntArray, r_gen: IntArray, size: int) -> None:
    """The finish heap of slots [:lz.slots]; a sorted list is a heap, and numpy sorts."""
    k = lz.slots
    keys = (r_tgt[:k] - r_gen[:k]) * size + np.arange(k, dtype=np.int64)
    lz.heap = np.sort(keys).tolist()


class WaitingQueue:
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


def mixed_step(
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
    cost: StepCostModel | FittedStepCost,
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
    end = clock + cost.step_time(n_tokens, context, pairs, decode_tokens)

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


def resume_times(pre_r: list[int], resumes: list[tuple[int, float]], n: int) -> FloatArray:
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


def fast_forward_decode(
    nr: int,
    r_comp: IntArray,
    r_gen: IntArray,
    r_ntok: IntArray,
    r_blk: IntArray,
    r_tgt: IntArray,
    cost: StepCostModel | FittedStepCost,
    bs: int,
    room: int,
    clock: float,
    limit: float,
) -> tuple[FloatArray, IntArray] | None:
    """Advance a pure-decode batch by as many steps as provably change nothing else.

    Stops before: the first completion, the first step starting at or after `limit` (next
    arrival or end), and the first step whose new blocks would exceed `room` (the free
    blocks, less any the waiting head needs kept for its step log to hold). Mutates the batch
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
    fits = int(np.searchsorted(used_new, room, side="right"))
    steps = min(steps, fits)
    if steps < 1:
        return None
    r_comp[:nr] = c + steps
    r_gen[:nr] += steps
    r_ntok[:nr] += steps
    r_blk[:nr] = -(-(c + steps) // bs)
    return ends[:steps], used_new[:steps]


def schedule_running(
    running: list[int],
    waiting: WaitingQueue,
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
    on_preempt: Callable[[int, int, int], int] | None = None,
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
            # The free queue learns where its blocks went (and which others still share).
            if on_preempt is not None:
                free += on_preempt(victim, int(blocks[victim]), int(computed[victim]))
            else:
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
            if policy_priority:
                # It was the lowest priority and preempted itself; those after it rank higher
                # and may fit in the blocks it freed: vLLM goes on (scheduler.py, 0.33), and
                # `index` already points at the next one.
                continue
            break
        sched[req] = tokens
        budget -= tokens
        index += 1
    return sched, budget, free, preempted
