"""Adversarial inputs (bench/hostile.py, the classes bench_hostile.py times): results only.

Each class once was super-linear (backtracking patterns) or crashed; here each must parse to
what it is, with every line accounted for. Their cost per MB is in docs/benchmarks.md.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from preemptscope.ingest.logs import ParseOptions, parse_lines


def _hostile() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "hostile.py"
    spec = importlib.util.spec_from_file_location("hostile", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOSTILE = _hostile()
# What each class is: the only frame kinds it may fill (one row per line unless said).
EXPECTED = {
    "dash_runs": {"unrecognized"},
    "dash_runs_prompt": {"requests"},
    "config_prompt": {"requests"},
    "config_line": {"config"},
    "non_default_args": {"config"},
    "ansi_brackets": {"unrecognized"},
    "bare_literal": {"unrecognized"},
    "bare_name": {"unrecognized"},
    "stats_digits": {"scheduler_stats"},
    "stats_digits_prompt": {"requests"},
    "headers_prompt": {"requests"},
    "process_prefixes": {"other"},
    "json_deep": {"unrecognized"},
    "access_query": {"access"},
    "access_client": {"other"},
    "junk": {"unrecognized"},
    "carriage": {"unrecognized"},
    "short_lines": {"unrecognized"},
    "progress_bars": {"other"},
    "progress_varied": {"other"},
    "redraws": {"other"},
}


@pytest.mark.parametrize("name", sorted(HOSTILE.CLASSES))
def test_each_adversarial_class_parses_to_what_it_is(name: str) -> None:
    lines = HOSTILE.lines(name, 300_000)
    frames = parse_lines(lines, source="h", deployment="h", options=ParseOptions(year=2025))
    assert frames.accounting.check()
    assert frames.accounting.lines == len(lines)
    filled = {kind for kind, frame in frames.frames.items() if frame.height}
    assert filled == EXPECTED[name]
    if name.endswith("_prompt"):
        assert frames["requests"].height == len(lines)
        assert frames["requests"]["event"].unique().to_list() == ["received"]


def test_config_line_keeps_its_settings() -> None:
    lines = HOSTILE.lines("config_line", 300_000)
    frames = parse_lines(lines[:1], source="h", deployment="h", options=ParseOptions(year=2025))
    config = dict(frames["config"].select("key", "value").iter_rows())
    assert config["model"] == "m" and config["max_num_seqs"] == "8"


def test_non_default_args_keep_their_settings() -> None:
    lines = HOSTILE.lines("non_default_args", 100_000)
    frames = parse_lines(lines[:1], source="h", deployment="h", options=ParseOptions(year=2025))
    config = dict(frames["config"].select("key", "value").iter_rows())
    assert config == {"max_num_seqs": "8", "model": "m"}
