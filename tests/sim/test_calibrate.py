"""Calibration from the deployment's own data: the step-cost fit and the settings it trusts."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
from preemptscope.analysis.report import Capacity
from preemptscope.analysis.sim.calibrate import (
    StepPoints,
    fit,
    fit_step_cost,
    points_from_latencies,
    points_from_metrics,
    points_from_stats,
)
from preemptscope.analysis.sim.closedloop import _scaled, calibrated, closed_loop, settled
from preemptscope.analysis.sim.config import FittedStepCost, SimConfig, reserves_full_isl
from preemptscope.analysis.sim.engine import engine_key, simulate
from preemptscope.analysis.sim.fidelity import fidelity
from preemptscope.analysis.sim.observed import (
    ReplayFrames,
    build_replay,
    candidate_config,
    describe_cost,
    hit_rate_note,
)
from preemptscope.analysis.sim.scenarios import chat_traffic
from preemptscope.analysis.sim.workload import FloatArray, Workload
from preemptscope.ingest.schema import REQUEST_LATENCIES

from preemptscope.errors import ConfigError

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
TRUE_COST = FittedStepCost(per_step_s=0.030, per_prefill_token_s=0.0003, per_decode_token_s=0.0008)


def _client_rows(config: SimConfig, rate: float = 0.8) -> pl.DataFrame:
    """A simulated deployment's client results, as a bench file would give them."""
    wl = chat_traffic(rate=rate, duration=300, seed=4)
    result = simulate(wl, config, record_tokens=False)
    starts = [T0 + timedelta(seconds=float(a)) for a in wl.arrival]
    e2e = result.finish - wl.arrival
    ttft = result.first_token - wl.arrival
    out = result.output_len
    rows = {
        "source": ["sim"] * len(wl),
        "deployment": ["d"] * len(wl),
        "request_id": [f"r{i}" for i in range(len(wl))],
        "start": starts,
        "e2e": e2e.tolist(),
        "ttft": ttft.tolist(),
        "tpot": ((e2e - ttft) / np.maximum(out - 1, 1)).tolist(),
        "prompt_tokens": result.prompt_len.tolist(),
        "output_tokens": out.tolist(),
        "success": [True] * len(wl),
        "origin": ["jsonl"] * len(wl),
    }
    return pl.DataFrame(rows, schema=REQUEST_LATENCIES)


def test_the_fit_recovers_a_known_step_cost() -> None:
    config = SimConfig(num_gpu_blocks_override=100_000, max_model_len=8192, step_cost=TRUE_COST)
    points = points_from_latencies(_client_rows(config))
    assert points is not None
    fitted = fit(points)
    assert fitted is not None
    assert fitted.per_step_s == pytest.approx(TRUE_COST.per_step_s, rel=0.15)
    assert fitted.per_decode_token_s == pytest.approx(TRUE_COST.per_decode_token_s, rel=0.25)
    assert fitted.per_prefill_token_s == pytest.approx(TRUE_COST.per_prefill_token_s, rel=0.35)
    assert fitted.rel_error is not None and fitted.rel_error < 0.1


def test_settings_come_from_the_data_and_presets_are_said() -> None:
    config = SimConfig(num_gpu_blocks_override=2000, max_model_len=8192, step_cost=TRUE_COST)
    rows = _client_rows(config)
    seen = Capacity(
        num_gpu_blocks=2000,
        block_size=16,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        vllm_version="0.11.0",
    )
    replay = build_replay(
        seen, ReplayFrames(latencies=rows), preemptions=None, current={"max_num_seqs": 8}
    )
    assert replay.config.max_num_seqs == 64  # the data wins over --current
    assert any("--current max_num_seqs=8 ignored" in a for a in replay.assumptions)
    assert replay.config.num_gpu_blocks_override == 2000
    assert replay.config.scheduler_reserve_full_isl is False  # 0.11 admits a first chunk
    assert replay.config.step_cost is not None  # fitted, not the roofline preset
    assert any("GPU memory not shown" in a for a in replay.assumptions)
    # Nothing observed about KV: the preset's estimate, said in plain words.
    bare = build_replay(Capacity(), ReplayFrames(latencies=rows), preemptions=None)
    assert any(a.startswith("KV cache not shown") for a in bare.assumptions)
    assert any(a.startswith("max_num_seqs not shown") for a in bare.assumptions)


def test_the_observed_hit_rate_becomes_a_shared_prefix() -> None:
    rows = _client_rows(SimConfig(num_gpu_blocks_override=2000, step_cost=TRUE_COST))
    stats = pl.DataFrame({"running": [4, 5], "prefix_cache_hit_rate": [0.4, 0.5]})
    seen = Capacity(num_gpu_blocks=2000, block_size=16)
    replay = build_replay(seen, ReplayFrames(latencies=rows, stats=stats), preemptions=None)
    assert replay.observed.prefix_cache_hit_rate == pytest.approx(0.45)
    wl = replay.workload
    assert wl is not None and wl.shares_prefixes and wl.prefix_tokens is not None
    assert any("prefix-cache hit rate 45%: replayed as one" in a for a in replay.assumptions)
    now = replay.run()
    assert now.prefix_cache_hit_rate == pytest.approx(0.45, abs=0.05)
    assert hit_rate_note(replay, now) is None
    # Caching off in the server's args: nothing is shared, and the count is said to be odd.
    off = build_replay(
        Capacity(num_gpu_blocks=2000, block_size=16, enable_prefix_caching=False),
        ReplayFrames(latencies=rows, stats=stats),
        preemptions=None,
    )
    assert off.workload is not None and not off.workload.shares_prefixes
    assert not off.config.enable_prefix_caching
    assert off.run().prefix_cache_hit_rate is None
    note = hit_rate_note(off, off.run())
    assert note is not None and "0%" in note and "45%" in note


def test_no_request_data_means_nothing_to_replay() -> None:
    replay = build_replay(Capacity(num_gpu_blocks=2000, block_size=16), ReplayFrames(),
                          preemptions=3)  # fmt: skip
    assert not replay.replayable
    with pytest.raises(ConfigError):
        replay.run()


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.11.0", False), ("0.18.1", False), ("0.19.0", True), ("v0.33.0", True),
     ("0.10.1rc1", False), (None, None), ("dev", None)],
)  # fmt: skip
def test_whole_prompt_admission_follows_the_logged_version(
    version: str | None, expected: bool | None
) -> None:
    assert reserves_full_isl(version) is expected


def test_the_closed_loop_finds_a_cost_that_reproduces_now() -> None:
    config = SimConfig(num_gpu_blocks_override=2000, max_model_len=8192, step_cost=TRUE_COST)
    rows = _client_rows(config, rate=1.2)
    seen = Capacity(num_gpu_blocks=2000, block_size=16, max_num_seqs=256, max_model_len=8192)
    replay = build_replay(seen, ReplayFrames(latencies=rows), preemptions=None)
    assert replay.config.step_cost is not None
    # Start from a cost 40 % too slow: the replay of now misses, the closed loop mends it.
    slow = dataclasses.replace(
        replay.config.step_cost,
        per_step_s=replay.config.step_cost.per_step_s * 1.4,
        per_decode_token_s=replay.config.step_cost.per_decode_token_s * 1.4,
        per_prefill_token_s=replay.config.step_cost.per_prefill_token_s * 1.4,
    )
    off = dataclasses.replace(replay, config=dataclasses.replace(replay.config, step_cost=slow))
    assert not fidelity(off.observed, off.run()).verified
    loop = closed_loop(off)
    assert loop.replays > 1
    assert loop.residual.verified
    assert loop.residual.score() < fidelity(off.observed, off.run()).score()
    assert loop.describe().startswith("closed loop over ")
    assert loop.multipliers[0] < 1.0  # it sped the cost up
    # A cost that already reproduces now is kept, after one replay.
    kept = closed_loop(loop.replay)
    assert kept.replays == 1 and kept.replay is loop.replay
    assert calibrated(off).config == loop.replay.config  # what the advice replays
    nothing = build_replay(Capacity(num_gpu_blocks=2000), ReplayFrames(), preemptions=3)
    assert calibrated(nothing) is nothing  # nothing to replay: as it is


def test_the_replay_memo_tells_priorities_and_prefixes_apart() -> None:
    """Two workloads alike but for priorities (or a shared prefix) are two replays."""
    config = SimConfig(num_gpu_blocks_override=300, max_model_len=4096, step_cost=TRUE_COST)
    rows = _client_rows(config, rate=1.5)
    seen = Capacity(
        num_gpu_blocks=300, block_size=16, max_num_seqs=64, scheduling_policy="priority"
    )
    plain = build_replay(seen, ReplayFrames(latencies=rows), preemptions=None)
    assert plain.workload is not None and not plain.priorities_known
    n = len(plain.workload)
    ranked = dataclasses.replace(
        plain,
        workload=dataclasses.replace(plain.workload, priority=np.arange(n, dtype=np.int64) % 2),
    )
    a, b = plain.run(), ranked.run()
    assert not a.per_priority and set(b.per_priority) == {"0", "1"}
    assert (a.e2e_p99, a.preemptions) != (b.e2e_p99, b.preemptions)
    shared = dataclasses.replace(
        plain,
        workload=plain.workload.with_prefix(
            np.zeros(n, dtype=np.int64), np.minimum(plain.workload.prompt_len - 1, 256)
        ),
    )
    assert shared.run().prefix_cache_hit_rate != a.prefix_cache_hit_rate
    assert any("no request priorities" in x for x in plain.assumptions)


def test_a_replay_of_now_within_tolerance_but_biased_is_settled_further() -> None:
    """A replay of now near the edge of its tolerance passes that bias on to every
    prediction: the closed loop goes on until each figure is within half of it. Here the
    open-loop fit's costs, 1 % slower, replay now with e2e p99 about 10 % high (tolerance
    15 %; the fit itself replays it 7 % high, settled already)."""
    config = SimConfig(num_gpu_blocks_override=2000, max_model_len=8192, step_cost=TRUE_COST)
    rows = _client_rows(config, rate=1.2)
    seen = Capacity(num_gpu_blocks=2000, block_size=16, max_num_seqs=256, max_model_len=8192)
    fitted = build_replay(seen, ReplayFrames(latencies=rows), preemptions=None)
    assert fitted.config.step_cost is not None
    assert settled(fidelity(fitted.observed, fitted.run()))
    slower = _scaled(fitted.config.step_cost, (np.log(1.01), 0.0, 0.0))
    replay = dataclasses.replace(
        fitted, config=dataclasses.replace(fitted.config, step_cost=slower)
    )
    check = fidelity(replay.observed, replay.run())
    assert check.verified and not settled(check)
    p99 = next(c for c in check.checks if c.name == "e2e_p99")
    assert p99.off_by is not None and 0.075 < p99.off_by <= 0.15
    loop = closed_loop(replay)
    assert loop.replays > 1 and loop.residual.verified and settled(loop.residual)
    assert loop.residual.score() < check.score()
    assert loop.describe().startswith("closed loop over ")
    # Settled already: kept as it is, after one replay.
    kept = closed_loop(loop.replay)
    assert kept.replays == 1 and kept.replay is loop.replay


# --- the per-context-token cost -------------------------------------------------------------

CONTEXT_COST = dataclasses.replace(TRUE_COST, per_context_token_s=1e-6)
# The parity harness's stand-in GPU: 20 ms + 0.12 ms a scheduled token + 0.4 µs a context token.
TRUTH = FittedStepCost(
    per_step_s=0.02, per_prefill_token_s=1.2e-4, per_decode_token_s=1.2e-4, per_context_token_s=4e-7
)


def test_the_fit_recovers_a_known_context_cost() -> None:
    """Client rows of a deployment whose steps slow as its KV fills give the context cost
    back; without the context held the fit has no such term, and says so."""
    config = SimConfig(num_gpu_blocks_override=100_000, max_model_len=8192, step_cost=TRUTH)
    points = points_from_latencies(_client_rows(config))
    assert points is not None and points.c is not None
    fitted = fit(points)
    assert fitted is not None
    assert fitted.per_context_token_s == pytest.approx(TRUTH.per_context_token_s, rel=0.1)
    assert fitted.per_step_s == pytest.approx(TRUTH.per_step_s, rel=0.05)
    assert fitted.per_prefill_token_s == pytest.approx(TRUTH.per_prefill_token_s, rel=0.1)
    assert "per-context-token cost from the context held" in fitted.basis
    blind = fit(dataclasses.replace(points, c=None))
    assert blind is not None and blind.per_context_token_s == 0.0
    assert "no per-context-token cost: no context held observed" in blind.basis


def _points(
    rng: np.random.Generator, cost: FittedStepCost, context: FloatArray, k: int = 200
) -> StepPoints:
    """Average steps of a known cost (1 % noise): t = (a + b_d n + c ctx) / (1 - b_p p)."""
    n = rng.uniform(2, 40, k)
    p = rng.uniform(0, 2000, k)
    t = (cost.per_step_s + cost.per_decode_token_s * n + cost.per_context_token_s * context) / (
        1 - cost.per_prefill_token_s * p
    )
    return StepPoints(t * rng.normal(1, 0.01, k), n, p, f"{k} synthetic points", context)


def test_a_context_held_without_spread_gives_no_context_cost_and_says_so() -> None:
    """A KV full all the time: the context cost cannot be told from the per-step cost, which
    takes it; c stays 0 and the basis says why."""
    rng = np.random.default_rng(3)
    full = rng.normal(11_200, 5, 200)  # spread 0.04 %
    fitted = fit(_points(rng, TRUTH, full))
    assert fitted is not None
    assert fitted.per_context_token_s == 0.0
    assert "no per-context-token cost: the context held (mean 11,200 tokens" in fitted.basis
    assert "standard errors of 0" in fitted.basis
    absorbed = TRUTH.per_step_s + TRUTH.per_context_token_s * 11_200
    assert fitted.per_step_s == pytest.approx(absorbed, rel=0.05)
    # With spread the same cost is found.
    spread = fit(_points(rng, TRUTH, rng.uniform(2_000, 20_000, 200)))
    assert spread is not None
    assert spread.per_context_token_s == pytest.approx(TRUTH.per_context_token_s, rel=0.1)


def test_points_far_above_the_fit_are_set_aside() -> None:
    """Preempted requests' TPOT holds their time evicted: a quarter of the points 20-60 %
    slow would load the costs; they are set aside, and the basis counts them."""
    rng = np.random.default_rng(5)
    clean = _points(rng, TRUTH, rng.uniform(2_000, 20_000, 200))
    slow = np.zeros(200, dtype=bool)
    slow[rng.choice(200, 50, replace=False)] = True
    stalled = dataclasses.replace(clean, t=clean.t * np.where(slow, rng.uniform(1.2, 1.6, 200), 1))
    fitted = fit(stalled)
    assert fitted is not None
    for name in ("per_step_s", "per_prefill_token_s", "per_context_token_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(TRUTH, name), rel=0.1), name
    assert 140 <= fitted.points <= 150  # the slow ones set aside, and at most a few others
    assert f"({200 - fitted.points} far above the fit set aside)" in fitted.basis
    # Noise alone: a tail point or two (2.5 deviations, one-sided), the costs the same.
    kept = fit(clean)
    assert kept is not None and kept.points >= 196
    assert kept.per_step_s == pytest.approx(fitted.per_step_s, rel=0.02)


def test_stats_lines_and_metrics_give_the_context_from_kv_usage() -> None:
    """Without client rows the context held is KV usage x the observed blocks x block size;
    with no block count there is none (c = 0, said)."""
    rng = np.random.default_rng(7)
    k, kv_tokens = 60, 22_400.0
    running = rng.integers(4, 30, k).astype(np.float64)
    usage = rng.uniform(0.2, 1.0, k)
    prompt = rng.uniform(0, 1500, k)
    t = (
        TRUTH.per_step_s
        + TRUTH.per_decode_token_s * running
        + TRUTH.per_context_token_s * usage * kv_tokens
    ) / (1 - TRUTH.per_prefill_token_s * prompt)
    times = [T0 + timedelta(seconds=10 * i) for i in range(k)]
    stats = pl.DataFrame(
        {
            "timestamp": times,
            "running": running.astype(np.int64),
            "generation_throughput": running / t,
            "prompt_throughput": prompt,
            "gpu_kv_cache_usage": usage,
        }
    )
    points = points_from_stats(stats, kv_tokens)
    assert points is not None and points.c is not None
    assert np.allclose(points.c, usage * kv_tokens)
    fitted = fit_step_cost(None, None, stats, kv_tokens=kv_tokens)
    assert fitted is not None
    assert fitted.per_context_token_s == pytest.approx(TRUTH.per_context_token_s, rel=0.05)
    blind = fit_step_cost(None, None, stats)
    assert blind is not None and blind.per_context_token_s == 0.0
    assert "no context held observed" in blind.basis
    # /metrics: an interval's context is the mean of the usage gauge at its two ends.
    itl_sum = np.cumsum(t * running * 10 / t.mean())
    itl_count = np.cumsum(running * 10 / t.mean())
    gauge = usage
    rows = []
    for i, ts in enumerate(times):
        for metric, sample, value in (
            ("inter_token_latency_seconds", "sum", itl_sum[i]),
            ("inter_token_latency_seconds", "count", itl_count[i]),
            ("num_requests_running", "value", running[i]),
            ("prompt_tokens", "value", float(prompt[: i + 1].sum() * 10)),
            ("kv_cache_usage_perc", "value", gauge[i]),
        ):
            rows.append({"timestamp": ts, "metric": metric, "sample": sample, "value": value})
    metrics = pl.DataFrame(rows)
    from_metrics = points_from_metrics(metrics, kv_tokens)
    assert from_metrics is not None and from_metrics.c is not None
    assert np.allclose(from_metrics.c, (gauge[1:] + gauge[:-1]) / 2 * kv_tokens)
    no_blocks = points_from_metrics(metrics)
    assert no_blocks is not None and no_blocks.c is None


def test_decode_steps_slow_as_the_context_grows() -> None:
    """Each decode step adds a token per request to the context it reads: with a context
    cost every step is a little slower than the one before, the fast paths included."""
    cost = FittedStepCost(per_step_s=0.02, per_prefill_token_s=1e-4, per_decode_token_s=1e-4,
                          per_context_token_s=1e-5)  # fmt: skip
    times = cost.decode_step_times(4, 1000.0, 5)
    expected = [cost.step_time(4, 1000 + 4 * j, 1000 + 4 * j, 4) for j in range(1, 6)]
    assert np.allclose(times, expected, rtol=0, atol=1e-15)
    flat = dataclasses.replace(cost, per_context_token_s=0.0)
    assert np.all(flat.decode_step_times(4, 1000.0, 5) == flat.per_step_s + 4e-4)
    wl = Workload(
        arrival=np.zeros(1),
        prompt_len=np.array([1000], dtype=np.int64),
        output_len=np.array([300], dtype=np.int64),
        priority=np.zeros(1, dtype=np.int64),
    )
    config = SimConfig(num_gpu_blocks_override=200, max_model_len=2048, step_cost=cost)
    gaps = np.diff(simulate(wl, config).token_time)
    assert np.allclose(np.diff(gaps), 1e-5, rtol=0, atol=1e-12)  # one more token each step
    plain = np.diff(simulate(wl, config, fast_forward=False).token_time)
    assert np.allclose(gaps, plain, rtol=0, atol=1e-9)
    no_context = dataclasses.replace(config, step_cost=flat)
    assert np.allclose(np.diff(np.diff(simulate(wl, no_context).token_time)), 0, atol=1e-12)


def test_every_cost_change_carries_the_context_cost() -> None:
    """A TP change scales it with the others; the closed loop's `all costs` multiplier too;
    two costs differing only in it are two engine runs."""
    config = SimConfig(num_gpu_blocks_override=2000, step_cost=CONTEXT_COST)
    doubled = candidate_config(config, {"tensor_parallel_size": 2})
    assert doubled.step_cost is not None
    assert doubled.step_cost.per_context_token_s == pytest.approx(5e-7)
    assert _scaled(CONTEXT_COST, (np.log(2.0), 0.0, 0.0)).per_context_token_s == pytest.approx(2e-6)
    assert engine_key(config) != engine_key(dataclasses.replace(config, step_cost=TRUE_COST))
    assert "1.000 µs per context token" in describe_cost(config)
    assert "per context token" not in describe_cost(
        dataclasses.replace(config, step_cost=TRUE_COST)
    )


def test_client_rows_without_a_decode_stretch_give_no_points() -> None:
    """Rows whose end is their first token (no decode stretch) are no points, and no error."""
    config = SimConfig(num_gpu_blocks_override=100_000, max_model_len=8192, step_cost=TRUTH)
    rows = _client_rows(config).with_columns(pl.col("ttft").alias("e2e"))
    assert points_from_latencies(rows) is None
