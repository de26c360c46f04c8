"""Workloads for the simulator: who arrives when, with how many prompt and output tokens.

Pure and seeded: the same arguments and seed give the same arrays.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from preemptscope.errors import ConfigError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_SAMPLE_BLOCK = 1 << 16  # lengths drawn at once by LengthDist.sample(last=...)


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: fixed, uniform [low, high], or lognormal (mean, cv)."""

    kind: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    mean: float = 512.0
    cv: float = 0.5  # coefficient of variation (lognormal)
    low: int = 1
    high: int = 1_000_000

    def sample(self, rng: np.random.Generator, n: int, last: int | None = None) -> IntArray:
        """`n` lengths; with `last`, only the last `last` of them: the same values (numpy's
        draws do not depend on how they are split into calls), drawn in blocks so that the
        `n` (millions, for a long log replayed over its tail) are never held at once."""
        if last is None or last >= n:
            values = self._draw(rng, n)
        else:
            values, left = np.empty(0), n
            while left:
                size = min(_SAMPLE_BLOCK, left)
                values = np.concatenate([values, self._draw(rng, size)])[-last:]
                left -= size
        out: IntArray = np.clip(np.rint(values), self.low, self.high).astype(np.int64)
        return out

    def _draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        if self.kind == "fixed":
            return np.full(n, self.mean, dtype=np.float64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, size=n).astype(np.float64)
        sigma2 = np.log1p(self.cv**2)
        mu = np.log(self.mean) - sigma2 / 2
        drawn: FloatArray = rng.lognormal(mu, np.sqrt(sigma2), size=n)
        return drawn


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival. Times in seconds from the start of the simulation."""

    arrival: FloatArray
    prompt_len: IntArray
    output_len: IntArray
    priority: IntArray  # vLLM semantics: lower value = served first
    request_ids: tuple[str, ...] = ()
    description: dict[str, Any] = field(default_factory=dict)
    # Shared prefixes (a system prompt): requests of one group (>= 0; -1: none) start with
    # the same `prefix_tokens` tokens, which vLLM's prefix cache computes once and shares.
    prefix_group: IntArray | None = None
    prefix_tokens: IntArray | None = None
    # Nested prefixes (a system prompt, then each conversation's earlier turns): per group,
    # its parent group (-1: a root) and its prefix's tokens; a member of a group shares every
    # group on the chain to its root. None: every group is a root.
    prefix_parent: IntArray | None = None
    prefix_node_tokens: IntArray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival)
        if not (len(self.prompt_len) == len(self.output_len) == len(self.priority) == n):
            raise ConfigError("workload arrays differ in length")
        if (self.prefix_group is None) != (self.prefix_tokens is None):
            raise ConfigError("workload prefix_group and prefix_tokens go together")
        if self.prefix_group is not None and self.prefix_tokens is not None:
            if not len(self.prefix_group) == len(self.prefix_tokens) == n:
                raise ConfigError("workload prefix arrays differ in length from arrivals")
            grouped = self.prefix_group >= 0
            if n and np.any(self.prefix_tokens[grouped] >= self.prompt_len[grouped]):
                raise ConfigError("a shared prefix must be shorter than the prompt")
        if (self.prefix_parent is None) != (self.prefix_node_tokens is None):
            raise ConfigError("workload prefix_parent and prefix_node_tokens go together")
        if self.prefix_parent is not None and self.prefix_node_tokens is not None:
            up, own = self.prefix_parent, self.prefix_node_tokens
            if self.prefix_group is None or len(up) != len(own):
                raise ConfigError("workload prefix tree arrays differ in length")
            if len(up) <= int(self.prefix_group.max(initial=-1)):
                raise ConfigError("workload prefix_group names a group the tree lacks")
            inner = up >= 0
            if np.any(up >= np.arange(len(up))) or np.any(own[inner] < own[up[inner]]):
                raise ConfigError("a prefix's parent must come before it and be no longer")
        if self.request_ids and len(self.request_ids) != n:
            raise ConfigError("workload request_ids differ in length from arrivals")
        if n and (np.any(np.diff(self.arrival) < 0) or self.arrival[0] < 0):
            raise ConfigError("workload arrivals must be sorted and non-negative")
        if n and (self.prompt_len.min() < 1 or self.output_len.min() < 1):
            raise ConfigError("every request needs at least 1 prompt and 1 output token")

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def duration(self) -> float:
        return float(self.arrival[-1]) if len(self) else 0.0

    def ids(self) -> tuple[str, ...]:
        return self.request_ids or tuple(f"req-{i}" for i in range(len(self)))

    @property
    def shares_prefixes(self) -> bool:
        return self.prefix_group is not None and bool(np.any(self.prefix_group >= 0))

    def digest(self) -> str:
        """Everything a simulation reads from the workload, hashed (a cache key)."""
        h = hashlib.sha1()
        arrays = [self.arrival, self.prompt_len, self.output_len, self.priority]
        if self.prefix_group is not None and self.prefix_tokens is not None:
            arrays += [self.prefix_group, self.prefix_tokens]
        if self.prefix_parent is not None and self.prefix_node_tokens is not None:
            arrays += [self.prefix_parent, self.prefix_node_tokens]
        for a in arrays:
            h.update(np.ascontiguousarray(a).tobytes())
            h.update(b"|")
        return h.hexdigest()

    def with_prefix(
        self,
        group: IntArray | None,
        tokens: IntArray | None,
        parent: IntArray | None = None,
        node_tokens: IntArray | None = None,
    ) -> Workload:
        return dataclasses.replace(
            self,
            prefix_group=group,
            prefix_tokens=tokens,
            prefix_parent=parent,
            prefix_node_tokens=node_tokens,
        )


def _arrivals(
    rng: np.random.Generator,
    rate_schedule: Sequence[tuple[float, float]],
    duration: float,
    burstiness: float,
) -> FloatArray:
    """Arrival times of a (possibly bursty) renewal process whose rate follows a schedule.

    Inter-arrival gaps are gamma(shape=burstiness) in "expected-arrivals" space (burstiness 1 is
    Poisson, below 1 burstier, as `vllm bench serve --burstiness`), mapped to time through the
    piecewise-constant rate schedule [(start_s, req_per_s), ...].
    """
    if burstiness <= 0:
        raise ConfigError(f"burstiness must be > 0, got {burstiness}")
    starts = np.array([s for s, _ in rate_schedule] + [duration], dtype=np.float64)
    rates = np.array([r for _, r in rate_schedule], dtype=np.float64)
    if starts[0] != 0 or np.any(np.diff(starts) < 0) or np.any(rates < 0):
        raise ConfigError("rate schedule must start at 0, be sorted and have rates >= 0")
    # Cumulative expected arrivals at each segment boundary.
    cum = np.concatenate([[0.0], np.cumsum(rates * np.diff(starts))])
    total = float(cum[-1])
    if total <= 0:
        return np.zeros(0, dtype=np.float64)
    n_guess = int(total * 1.2 + 10 * np.sqrt(total) + 20)
    gaps = rng.gamma(burstiness, 1.0 / burstiness, size=n_guess)
    points = np.cumsum(gaps)
    while points[-1] < total:
        more = np.cumsum(rng.gamma(burstiness, 1.0 / burstiness, size=n_guess)) + points[-1]
        points = np.concatenate([points, more])
    points = points[points < total]
    seg = np.clip(np.searchsorted(cum, points, side="right") - 1, 0, len(rates) - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        times = starts[seg] + (points - cum[seg]) / rates[seg]
    result: FloatArray = np.sort(times[np.isfinite(times)])
    return result


def synthetic(
    *,
    rate: float | None = None,
    duration: float,
    seed: int = 0,
    prompt: LengthDist | None = None,
    output: LengthDist | None = None,
    burstiness: float = 1.0,
    rate_schedule: Sequence[tuple[float, float]] | None = None,
    priorities: Sequence[int] = (0,),
    id_prefix: str = "cmpl-",
) -> Workload:
    """Poisson (burstiness 1) or bursty arrivals at `rate` req/s, or following `rate_schedule`."""
    if rate_schedule is None:
        if rate is None or rate < 0:
            raise ConfigError("give a rate >= 0 or a rate_schedule")
        rate_schedule = [(0.0, rate)]
    if duration <= 0:
        raise ConfigError(f"duration must be > 0, got {duration}")
    rng = np.random.default_rng(seed)
    arrival = _arrivals(rng, rate_schedule, duration, burstiness)
    n = len(arrival)
    prompt_dist = prompt or LengthDist("lognormal", 512.0, 0.6, 16, 8192)
    output_dist = output or LengthDist("lognormal", 256.0, 0.6, 8, 4096)
    prompt_len = prompt_dist.sample(rng, n)
    output_len = output_dist.sample(rng, n)
    priority = rng.choice(np.asarray(priorities, dtype=np.int64), size=n)
    hexes = rng.integers(0, 2**63 - 1, size=(n, 2), dtype=np.int64)
    ids = tuple(f"{id_prefix}{a:016x}{b:016x}" for a, b in hexes)
    return Workload(
        arrival=arrival,
        prompt_len=prompt_len,
        output_len=output_len,
        priority=priority.astype(np.int64),
        request_ids=ids,
        description={
            "kind": "synthetic",
            "rate_schedule": [list(p) for p in rate_schedule],
            "burstiness": burstiness,
            "duration": duration,
            "seed": seed,
            "prompt": prompt_dist.__dict__,
            "output": output_dist.__dict__,
        },
    )


def from_bench_result(result: Mapping[str, Any], *, source: str = "bench.json") -> Workload:
    """The workload a `vllm bench serve --save-detailed` result recorded (a trace).

    Needs `input_lens` and `output_lens`; arrival times from `start_times` when present, else
    spread evenly over `duration` (documented as an assumption by the caller); request
    priorities from a `priorities` list beside them (else 0, vLLM's default).
    """
    from preemptscope.errors import InputError

    inputs, outputs = result.get("input_lens"), result.get("output_lens")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise InputError(source, "needs per-request input_lens and output_lens (--save-detailed)")
    if len(inputs) != len(outputs):
        raise InputError(source, "input_lens and output_lens differ in length")
    starts = result.get("start_times")
    n = len(inputs)
    if isinstance(starts, list) and len(starts) == n:
        t = np.asarray(starts, dtype=np.float64)
        origin = "start_times"
    else:
        duration = float(result.get("duration") or n)
        t = np.linspace(0.0, duration, n, endpoint=False)
        origin = "evenly spread over duration"
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    ranks = result.get("priorities")
    if isinstance(ranks, list) and len(ranks) == n:
        try:
            values = np.asarray(ranks, dtype=np.float64)
        except (TypeError, ValueError):
            values = np.full(n, np.nan)
        if not (np.isfinite(values).all() and (values == np.round(values)).all()):
            raise InputError(source, "`priorities` must hold integers")
        priority = values.astype(np.int64)[order]
    else:
        priority = np.zeros(n, dtype=np.int64)
    prompt = np.maximum(np.asarray(inputs, dtype=np.int64)[order], 1)
    # Failed requests report 0 output tokens; replay them as 1-token requests.
    output = np.maximum(np.asarray(outputs, dtype=np.int64)[order], 1)
    return Workload(
        arrival=t,
        prompt_len=prompt,
        output_len=output,
        priority=priority,
        request_ids=tuple(f"trace-{i}" for i in order),
        description={"kind": "trace", "source": source, "arrivals": origin, "requests": n},
    )
