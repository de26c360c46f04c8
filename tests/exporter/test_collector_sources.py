"""/metrics exports a preemption count only for sources that exist: no count is no series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from preemptscope.exporter.collector import build_registry
from preemptscope.exporter.live import DeploymentTotals, LiveState
from preemptscope.ingest.logs import ParseOptions, parse_lines
from prometheus_client import generate_latest

WHEN = datetime(2026, 3, 14, 9, 15, tzinfo=UTC)


def v1_lines(preemptions: bool = False) -> list[str]:
    """Ten minutes of a V1 engine at full KV with a queue (10-s stats lines)."""
    start = datetime(2026, 3, 14, 9, 0)
    lines = []
    for i in range(60):
        t = (start + timedelta(seconds=10 * i)).strftime("%m-%d %H:%M:%S")
        extra = ", Preemptions: 3" if preemptions and i % 2 else ""
        lines.append(
            f"INFO {t} [loggers.py:123] Engine 000: Avg prompt throughput: 900.0 tokens/s, "
            f"Avg generation throughput: 400.0 tokens/s, Running: 30 reqs, Waiting: 12 reqs"
            f"{extra}, GPU KV cache usage: 99.6%, Prefix cache hit rate: 0.0%"
        )
    return lines


def exposition(live: LiveState) -> str:
    live.analyze_now()
    return generate_latest(build_registry(live.snapshot)).decode()


def load(live: LiveState, lines: list[str], name: str = "prod") -> None:
    options = ParseOptions(reference_time=WHEN)
    live.add_log_batch(parse_lines(lines, source="vllm.log", deployment=name, options=options))


def test_v1_log_only_exports_no_preemption_count_series() -> None:
    live = LiveState(["prod"], window_s=60, history_s=3600, clock="data")
    load(live, v1_lines())
    text = exposition(live)
    assert 'preemptscope_over_capacity{deployment="prod"' in text
    assert "preemptscope_preemptions_total{" not in text  # no source, no series, no 0
    assert live.snapshot().totals["prod"].preemptions == {}


def test_v1_stats_field_exports_only_its_own_series() -> None:
    live = LiveState(["prod"], window_s=60, history_s=3600, clock="data")
    load(live, v1_lines(preemptions=True))
    text = exposition(live)
    assert 'preemptscope_preemptions_total{deployment="prod",source="v1_stats_field"} 90.0' in text
    assert 'source="v0_warning_counter"' not in text
    assert 'source="metrics_counter"' not in text


def test_a_v0_log_of_a_version_that_warns_counts_zero() -> None:
    """v0.4.3+ warns on the 1st preemption: a V0 log without a warning is a true 0 (lower bound)."""
    banner = (
        "INFO 03-14 08:59:00 llm_engine.py:237] Initializing an LLM engine (v0.5.4) with config: "
        "model='m', tokenizer='m', max_seq_len=8192"
    )
    stats = [
        f"INFO 03-14 09:00:{s:02d} metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 10.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 "
        "reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 0.0%."
        for s in range(0, 60, 10)
    ]
    live = LiveState(["new"], window_s=60, history_s=3600, clock="data")
    load(live, [banner, *stats], name="new")
    text = exposition(live)
    series = 'preemptscope_preemptions_total{deployment="new",source="v0_warning_counter"}'
    assert f"{series} 0.0" in text
    # The same stats without a version: maybe older than v0.4.3, so no count at all.
    unknown = LiveState(["old"], window_s=60, history_s=3600, clock="data")
    load(unknown, stats, name="old")
    assert "preemptscope_preemptions_total{" not in exposition(unknown)


def test_old_checkpoints_do_not_bring_back_zeros() -> None:
    old = {"preemptions": {"metrics_counter": 0, "v1_stats_field": 0, "v0_warning_counter": 7}}
    assert DeploymentTotals.from_dict(old, sources_known=False).preemptions == {
        "v0_warning_counter": 7
    }
    live = LiveState(["prod"], window_s=60, history_s=3600, saved={"deployments": {"prod": old}})
    assert live.totals["prod"].preemptions == {"v0_warning_counter": 7}


def test_a_true_zero_survives_a_restart() -> None:
    """A source that exists with 0 preemptions keeps its series across a checkpoint."""
    banner = (
        "INFO 03-14 08:59:00 llm_engine.py:237] Initializing an LLM engine (v0.5.4) with config: "
        "model='m', tokenizer='m', max_seq_len=8192"
    )
    live = LiveState(["new"], window_s=60, history_s=3600, clock="data")
    load(live, [banner], name="new")
    load(live, v0_stats(), name="new")  # a later batch: the version came with the first
    saved = live.saved_state()
    again = LiveState(["new"], window_s=60, history_s=3600, clock="data", saved=saved)
    assert again.totals["new"].preemptions == {"v0_warning_counter": 0}


def v0_stats() -> list[str]:
    return [
        f"INFO 03-14 09:00:{s:02d} metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 10.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 "
        "reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 0.0%."
        for s in range(0, 60, 10)
    ]
