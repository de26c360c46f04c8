"""Simulated logs with prompt token ids (writers.render_log(prompt_ids=True)): members of a
shared-prefix group print the same first ids, others differ from the first token on."""

from __future__ import annotations

import ast
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.observed_prefixes import PROMPT_HASHES, log_prompt_hashes
from preemptscope.analysis.sim.workload import LengthDist, Workload, synthetic
from preemptscope.analysis.sim.writers import prompt_token_ids, render_log
from preemptscope.ingest.logs import parse_path

from preemptscope.cli import main
from preemptscope.inputs import load_inputs

START = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def shared_workload(n: int = 40, prefix: int = 1024, seed: int = 0) -> Workload:
    """Poisson arrivals; every prompt but the last 5 starts with one `prefix`-token prompt."""
    wl = synthetic(
        rate=2.0,
        duration=n / 2.0,
        seed=seed,
        prompt=LengthDist("uniform", low=prefix + 50, high=prefix + 400),
        output=LengthDist("uniform", low=20, high=80),
    )
    group = np.where(np.arange(len(wl)) < len(wl) - 5, 0, -1).astype(np.int64)
    return wl.with_prefix(group, np.where(group == 0, prefix, 0).astype(np.int64))


def test_group_members_share_their_first_ids() -> None:
    wl = shared_workload()
    first, second, alone = (
        prompt_token_ids(wl, 0),
        prompt_token_ids(wl, 1),
        prompt_token_ids(wl, len(wl) - 1),
    )
    assert len(first) == wl.prompt_len[0] and len(alone) == wl.prompt_len[-1]
    assert first[:1024] == second[:1024] and first[1024:1040] != second[1024:1040]
    assert alone[:16] != first[:16]


@pytest.mark.parametrize("era", ["v0", "v1", "v1-preemptions"])
def test_the_log_prints_the_ids_each_era_prints(era: str) -> None:
    wl = shared_workload(n=12)
    result = simulate(wl, SimConfig(num_gpu_blocks_override=2000, enable_prefix_caching=True))
    lines = render_log(result, era=era, start=START, prompt_ids=True)
    shown = [
        ast.literal_eval(m.group(1))
        for line in lines
        if (m := re.search(r"prompt_token_ids: (\[[\d, ]*\])", line))
    ]
    assert len(shown) == len(wl)
    assert shown[0] == prompt_token_ids(wl, 0)
    if era == "v1-preemptions":  # 0.11.1+: the ids are on the DEBUG details line
        assert all("Request " in line and " details: " in line
                   for line in lines if "prompt_token_ids: [" in line)  # fmt: skip
    plain = render_log(result, era=era, start=START)
    assert not any("prompt_token_ids: [" in line for line in plain)


@pytest.fixture(scope="module")
def prefix_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A server with prefix caching on, one 1,024-token system prompt: its log per era, with
    the prompts' ids and without."""
    wl = shared_workload(n=200)
    config = SimConfig(num_gpu_blocks_override=900, max_num_seqs=32, enable_prefix_caching=True)
    result = simulate(wl, config)
    out = tmp_path_factory.mktemp("prefix-logs")
    paths = {}
    for era, ids in (("v1", True), ("v1-preemptions", True), ("plain", False)):
        lines = render_log(result, era="v1" if era == "plain" else era, start=START,
                           prompt_ids=ids)  # fmt: skip
        paths[era] = out / f"{era}.log"
        paths[era].write_text("\n".join(lines) + "\n")
    return paths


def _whatif(log: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["whatif", "--log", str(log), "--max-num-seqs", "8", "--json"]) == 0
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    return body


@pytest.mark.parametrize("era", ["v1", "v1-preemptions"])
def test_a_log_with_prompt_ids_replays_its_own_prefixes(
    prefix_logs: dict[str, Path], era: str, capsys: pytest.CaptureFixture[str]
) -> None:
    body = _whatif(prefix_logs[era], capsys)
    notes = body["assumptions"]
    hashed = next(n for n in notes if n.startswith("prompt block hashes for "))
    n = body["now"]["requests"]
    assert f"for {n} of {n} replayed requests (prompt lengths exact for {n} " in hashed
    assert "1 shared prefix, up to 1,024 tokens" in hashed
    assert not any("inferred from the counters" in note for note in notes)
    assert body["workload"]["prefixes"] == "hashes"
    assert "prompt lengths from the prompt block hashes" in body["workload"]["basis"]
    # The hit rate the replay reproduces, beside the one the log printed: both stated.
    seen, replayed = body["observed"]["prefix_cache_hit_rate"], body["now"]["prefix_cache_hit_rate"]
    assert seen > 0.7 and abs(replayed - seen) <= 0.05
    stated = next(note for note in notes if note.startswith("the replay's prefix-cache hit rate"))
    assert f"{replayed:.0%}" in stated and f"the deployment's {seen:.0%}" in stated


def test_without_ids_the_hit_rate_stays_the_source(
    prefix_logs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    body = _whatif(prefix_logs["plain"], capsys)
    assert any("inferred from the counters" in note for note in body["assumptions"])
    assert not any(n.startswith("prompt block hashes") for n in body["assumptions"])


def test_the_report_sweep_states_the_hashed_hit_rate(
    prefix_logs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "r.html"
    argv = ["report", str(prefix_logs["v1"]), "--html", str(html), "--whatif-sweep", "8,16"]
    assert main(argv) == 0
    capsys.readouterr()
    sharing = re.search(r'<p class="note whatif-sharing">([^<]*)</p>', html.read_text())
    assert sharing and "prompt block hashes" in sharing.group(1)


@pytest.mark.parametrize("era", ["v0", "v1", "v1-preemptions"])
def test_parsed_and_reduced_logs_give_the_same_hashes(tmp_path: Path, era: str) -> None:
    """`parse` keeps the request rows and their prompts apart (joined here, per file);
    `report` and `whatif` keep ARRIVALS/JOINED rows with the hashes on: the same hashes."""
    wl = shared_workload(n=30)
    result = simulate(wl, SimConfig(num_gpu_blocks_override=900, enable_prefix_caching=True))
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(render_log(result, era=era, start=START, prompt_ids=True)) + "\n")
    parsed = log_prompt_hashes([parse_path(log)])
    reduced = log_prompt_hashes(load_inputs([str(log)])[0].logs)
    assert parsed is not None and reduced is not None
    assert parsed.height == reduced.height == len(wl) and parsed.equals(reduced)
    assert parsed[PROMPT_HASHES].null_count() == 0
    # The replay's tail only: the last `keep` requests started by `until`.
    until = parsed["timestamp"][20]
    tail = log_prompt_hashes(load_inputs([str(log)])[0].logs, until=until, keep=5)
    assert tail is not None
    assert tail.equals(parsed.filter(parsed["timestamp"] <= until).tail(5))


def test_a_file_without_ids_keeps_its_requests_places(tmp_path: Path) -> None:
    """Two files of one server, the first printing no ids: its requests stay in the hashes'
    frame with null hashes, so the hashes line up with every arrival."""
    wl = shared_workload(n=20)
    result = simulate(wl, SimConfig(num_gpu_blocks_override=900, enable_prefix_caching=True))
    early, late = tmp_path / "early.log", tmp_path / "late.log"
    later = START + timedelta(hours=1)
    early.write_text("\n".join(render_log(result, start=START)) + "\n")
    late.write_text("\n".join(render_log(result, start=later, prompt_ids=True)) + "\n")
    for logs in (
        load_inputs([f"{early}=srv", f"{late}=srv"])[0].logs,
        [parse_path(early), parse_path(late)],
    ):
        found = log_prompt_hashes(logs)
        assert found is not None and found.height == 2 * len(wl)
        assert found[PROMPT_HASHES].head(len(wl)).null_count() == len(wl)
        assert found[PROMPT_HASHES].tail(len(wl)).null_count() == 0


def nested_workload(conversations: int = 30, turns: int = 3, seed: int = 0) -> Workload:
    """A 512-token system prompt (node 0), then conversations whose every turn repeats the
    one before it (node of turn k: the conversation's first k turns), a turn every 20 s."""
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(1.0, conversations))
    rows = []  # (arrival, conversation, turn, prompt, the node it is below)
    parent, ends = [-1], [512]
    for c in range(conversations):
        length, up = 512, 0
        for k in range(turns):
            length += int(rng.integers(60, 200))
            rows.append((starts[c] + 20.0 * k, c, k, length, up))
            if k < turns - 1:  # the next turn shares this one's whole prompt (on 16s)
                parent.append(up)
                ends.append((length - 1) // 16 * 16)
                up = len(parent) - 1
    rows.sort()
    arrival = np.array([r[0] for r in rows])
    prompt = np.array([r[3] for r in rows], dtype=np.int64)
    group = np.array([r[4] for r in rows], dtype=np.int64)
    # A turn's deepest node is the one it shares with the next turn (its own prompt); the
    # last turn's is the one its previous turn made.
    for i, r in enumerate(rows):
        if r[2] < turns - 1:
            group[i] = 1 + r[1] * (turns - 1) + r[2]
    ends_a = np.array(ends, dtype=np.int64)
    return Workload(
        arrival=arrival - arrival[0],
        prompt_len=prompt,
        output_len=rng.integers(20, 60, len(rows)).astype(np.int64),
        priority=np.zeros(len(rows), dtype=np.int64),
    ).with_prefix(group, ends_a[group], np.array(parent, dtype=np.int64), ends_a)


def test_nested_prefixes_come_back_from_the_log_with_client_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A simulated server with a system prompt and conversations, its log printing the ids
    and its client rows (bench JSON): the replay lines the log's hashes up with the rows and
    shares the tree (both depths), at the hit rate the server counted."""
    from preemptscope.analysis.sim.writers import render_bench_result

    wl = nested_workload()
    config = SimConfig(num_gpu_blocks_override=600, max_num_seqs=32, enable_prefix_caching=True)
    result = simulate(wl, config)
    log, bench = tmp_path / "vllm.log", tmp_path / "bench.json"
    log.write_text("\n".join(render_log(result, era="v1", start=START, prompt_ids=True)) + "\n")
    bench.write_text(json.dumps(render_bench_result(result, start=START)))
    argv = ["whatif", "--log", str(log), "--bench", str(bench), "--max-num-seqs", "8", "--json"]
    assert main(argv) == 0
    body = json.loads(capsys.readouterr().out)
    hashed = next(n for n in body["assumptions"] if n.startswith("prompt block hashes for "))
    assert "1 shared prefix and 60 nested in them" in hashed
    truth = result.prefix_cache_hit_rate
    assert truth is not None and truth > 0.5
    assert abs(body["now"]["prefix_cache_hit_rate"] - truth) <= 0.05
