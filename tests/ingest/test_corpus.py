"""Every corpus file copied from the shared corpus meets its INDEX.md expectations."""

from __future__ import annotations

import json

import pytest
from preemptscope.ingest.logs import ParseOptions, parse_path
from preemptscope.ingest.summary import LogSummary

from .conftest import CORPUS

EXPECTED: dict[str, dict[str, object]] = json.loads((CORPUS / "expected.json").read_text())


def test_every_copied_corpus_file_has_expectations() -> None:
    copied = {p.name for p in CORPUS.glob("*.log")}
    assert copied == set(EXPECTED)
    assert len(copied) == 37


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_matches_index(name: str) -> None:
    expected = EXPECTED[name]
    frames = parse_path(CORPUS / name, options=ParseOptions(year=2025))
    acc = frames.accounting
    assert acc.lines == expected["lines"]
    assert acc.check(), acc
    assert frames["preemption_warning"]["line"].n_unique() == expected["P"]
    assert frames["scheduler_stats"].height == expected["S"]
    summary = LogSummary(path=name, deployment=frames.deployment)
    summary.add(frames)
    last = summary.to_json()["last_scheduler_stats"]
    if expected["last"] is None:
        assert last is None
    else:
        assert isinstance(expected["last"], dict)
        assert last is not None
        assert last["running"] == expected["last"]["running"]
        assert last["waiting"] == expected["last"]["waiting"]
        assert last["gpu_kv_cache_usage"] == pytest.approx(expected["last"]["gpu_kv_cache_usage"])
    if "counter" in expected:
        assert frames["preemption_warning"]["cumulative"].to_list() == [expected["counter"]]


def test_lookalikes_are_not_preemptions() -> None:
    frames = parse_path(CORPUS / "012-v010-enginecore0-lmcache-preempted-resumed.log")
    assert frames["preemption_warning"].height == 0
    messages = frames["other"]["message"].to_list()
    assert any("Preempted request" in m for m in messages)
    # LMCache's own format is understood as an envelope, not left unrecognized.
    assert frames.accounting.unrecognized_lines == 0


def test_glued_records_split_with_their_own_timestamps() -> None:
    frames = parse_path(
        CORPUS / "044-v027-ray-asyncllmengine-newlines-collapsed-one-line.log",
        options=ParseOptions(year=2024),
    )
    stats = frames["scheduler_stats"]
    assert stats["line"].unique().to_list() == [1]
    assert stats["process"].unique().to_list() == ["_AsyncLLMEngine"]
    stamps = stats["timestamp"].to_list()
    assert stamps == sorted(stamps) and len(set(stamps)) == 6
    # The sixth record is cut in the paste: kept, with the fields it has.
    assert stats["gpu_kv_cache_usage"].null_count() == 1


def test_hard_wrapped_stats_rejoined() -> None:
    frames = parse_path(CORPUS / "034-v010-docker-ts-wrapped-stats-kv-99pct.log")
    stats = frames["scheduler_stats"]
    assert stats["line"].to_list() == [3, 7]
    assert stats["generation_throughput"].to_list() == [756.7, 736.1]
    assert stats["prefix_cache_hit_rate"].to_list() == pytest.approx([0.432, 0.435])
    assert frames.accounting.unrecognized_lines == 0
    assert frames["access"].height == 5
    # docker's RFC3339 prefix is UTC and wins over vLLM's local (UTC-7) clock.
    assert stats["timestamp"][0].isoformat() == "2025-10-15T00:04:48.758564+00:00"


def test_extra_fields_kept_as_text() -> None:
    frames = parse_path(
        CORPUS / "052-v030-stats-with-extra-iteration-time-fields-finished-request.log"
    )
    row = frames["scheduler_stats"].row(0, named=True)
    assert row["extra"] == "Max iteration time: 386.7 ms, Avg time/tok:149.4 ms"
    assert (row["running"], row["waiting"], row["swapped"]) == (35, 115, 0)
    assert frames["requests"]["event"].to_list() == ["finished", "finished"]
