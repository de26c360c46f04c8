"""Closed-loop calibration: the step cost that makes the replay of now reproduce what was seen.

The open-loop fit (calibrate.py) reads step times off the data (TPOT, ITL, throughput). Under
preemption those hold the time a request spent evicted and recomputed, and a cached prompt's
tokens are counted though not computed, so a replay with that cost can miss the deployment's
own tok/s and p99 even where the scheduling is right. Starting from the open-loop cost, a
pattern search over three multipliers (all costs, the per-step cost, the per-prefill-token
cost, each in log space) replays now and keeps the cost whose replay is nearest the observed
figures (fidelity.Fidelity.score: each error over its tolerance; a verified replay before one
that is not). It stops as soon as the replay of now is settled (within every tolerance, each
rate and latency within half of it), or after `max_replays`. Pure but for the replays.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from preemptscope.analysis.sim.config import FittedStepCost
from preemptscope.analysis.sim.fidelity import Fidelity, fidelity
from preemptscope.analysis.sim.observed import Replay
from preemptscope.analysis.sim.whatif import WhatIfOutcome

MAX_REPLAYS = 16
_STEPS = (math.log(1.3), math.log(1.1), math.log(1.03))  # multiplier steps, coarse to fine
# A replay of now within its tolerances can still carry a bias every prediction inherits (a
# p99 14 % high at now put other settings' p99 16-20 % high): the search goes on until each
# rate or latency figure is within this share of its tolerance.
SETTLED = 0.5


def settled(check: Fidelity) -> bool:
    """Verified, and every rate or latency figure within SETTLED of its tolerance."""
    return check.verified and all(
        c.name == "preemptions" or (c.off_by is not None and abs(c.off_by) <= SETTLED * c.tolerance)
        for c in check.checks
    )


def _better(a: Fidelity, b: Fidelity) -> bool:
    """a is nearer the data than b: verified first, then the lower score."""
    return (not a.verified, a.score()) < (not b.verified, b.score() - 1e-9)


@dataclass(frozen=True)
class ClosedLoop:
    """The replay with the cost chosen, its replay of now, and the residual against the data."""

    replay: Replay
    now: WhatIfOutcome
    residual: Fidelity
    replays: int  # simulations run (1: the open-loop cost was kept as it is)
    multipliers: tuple[float, float, float] = (1.0, 1.0, 1.0)  # all, per step, per prefill

    def method(self) -> str:
        """How the step cost was chosen, without the residual."""
        if self.replays == 1:
            return "open-loop cost kept"
        m = self.multipliers
        return (
            f"closed loop over {self.replays} replays of now (costs x{m[0]:.2f}, per step "
            f"x{m[1]:.2f}, per prefill token x{m[2]:.2f})"
        )

    def describe(self) -> str:
        return f"{self.method()}; {self.residual.describe()}"


def _scaled(cost: FittedStepCost, x: tuple[float, float, float]) -> FittedStepCost:
    every, step, prefill = (math.exp(v) for v in x)
    return dataclasses.replace(
        cost,
        per_step_s=cost.per_step_s * every * step,
        per_prefill_token_s=cost.per_prefill_token_s * every * prefill,
        per_decode_token_s=cost.per_decode_token_s * every,
        per_context_token_s=cost.per_context_token_s * every,
        basis=cost.basis + ", closed loop",
    )


def closed_loop(
    replay: Replay, *, until: float | None = None, max_replays: int = MAX_REPLAYS
) -> ClosedLoop:
    """The replay whose step cost reproduces now best (the open-loop one if it already does)."""
    now = replay.run(until=until)
    residual = fidelity(replay.observed, now)
    cost = replay.config.step_cost
    rated = any(c.name != "preemptions" for c in residual.checks)
    if cost is None or settled(residual) or not rated or max_replays < 2:
        return ClosedLoop(replay, now, residual, 1)

    def trial(x: tuple[float, float, float]) -> tuple[float, Replay, WhatIfOutcome, Fidelity]:
        config = dataclasses.replace(replay.config, step_cost=_scaled(cost, x))
        moved = dataclasses.replace(replay, config=config)
        out = moved.run(until=until)
        check = fidelity(replay.observed, out)
        return check.score(), moved, out, check

    best_x: tuple[float, float, float] = (0.0, 0.0, 0.0)
    best = (residual.score(), replay, now, residual)
    runs = 1
    for step in _STEPS:
        improved = True
        while improved and runs < max_replays and not settled(best[3]):
            improved = False
            for axis in range(3):
                for sign in (1.0, -1.0):
                    if runs >= max_replays or settled(best[3]):
                        break
                    x = list(best_x)
                    x[axis] += sign * step
                    candidate = trial((x[0], x[1], x[2]))
                    runs += 1
                    if _better(candidate[3], best[3]):
                        best, best_x, improved = candidate, (x[0], x[1], x[2]), True
    _, chosen, out, check = best
    multipliers = (math.exp(best_x[0]), math.exp(best_x[1]), math.exp(best_x[2]))
    return ClosedLoop(chosen, out, check, runs, multipliers)


def calibrated(replay: Replay) -> Replay:
    """The replay with the closed loop's step cost (as it is when there is nothing to replay)."""
    return closed_loop(replay).replay if replay.replayable else replay
