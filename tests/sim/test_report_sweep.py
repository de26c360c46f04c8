"""`report --whatif-sweep`: the sweep replays with the closed loop's step cost and carries the
same label as the advice and `whatif`; per-class figures in the HTML are the JSON's."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from preemptscope.analysis.analyze import AnalysisParams, analyze_deployment
from preemptscope.analysis.sim import observed
from preemptscope.analysis.sim.closedloop import closed_loop

from preemptscope.cli import main
from preemptscope.commands import report as report_command
from preemptscope.commands.report import whatif_sweep
from preemptscope.inputs import load_inputs

FIXTURES = Path(__file__).parent.parent / "fixtures" / "parity"
MIX = next((FIXTURES / "priority-mix").glob("s0-*"))


def _argv(run: Path) -> list[str]:
    return [str(run / "vllm.log"), "--metrics", str(run / "metrics"), "--bench",
            str(run / "requests.jsonl")]  # fmt: skip


def _figures(text: str) -> dict[str, Any]:
    marker = '<script type="application/json" id="preemptscope-figures">'
    body = text.split(marker, 1)[1].split("</script>", 1)[0]
    figures: dict[str, Any] = json.loads(body)
    return figures


def _rows(text: str, kind: str) -> dict[tuple[str, str], dict[str, str]]:
    """The per-class table of `kind`: (setting, priority) -> {column key: cell text}."""
    table = re.search(rf'<table class="classes" data-kind="{kind}">(.*?)</table>', text, re.S)
    assert table, kind
    out = {}
    for setting, cls, cells in re.findall(
        r'<tr data-setting="([^"]*)" data-priority="([^"]*)">(.*?)</tr>', table.group(1), re.S
    ):
        out[(setting, cls)] = dict(re.findall(r'data-key="([^"]+)">([^<]*)<', cells))
    return out


def _seconds(value: float) -> str:
    return f"{value:,.2f} s" if value < 100 else f"{value:,.0f} s"


def test_the_sweep_carries_the_advices_calibration_label_and_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "r.html"
    assert (
        main(["report", *_argv(MIX), "--json", "--html", str(html), "--whatif-sweep", "8,64"]) == 0
    )
    body = json.loads(capsys.readouterr().out)
    dep = body["deployments"][0]
    text = html.read_text(encoding="utf-8")
    section = re.search(r'<section class="panel whatif-sweep".*?</section>', text, re.S)
    assert section
    label = re.search(r'<p class="whatif-label">([^<]*)\.</p>', section.group(0))
    assert label and label.group(1).startswith(("Verified: ", "Unverified: "))
    # The same words as the advice's check of its replay of now: one residual behind both.
    assert label.group(1) == dep["advice_check"]
    replayed = [a for a in dep["advice"] if a["predicted"] and "Unverified: GPU" not in a["reason"]]
    assert replayed
    # The curve's point at the current max_num_seqs is the advice's replay of now.
    now = replayed[0]["predicted"]["now"]
    curve = {
        t["name"]: dict(zip(t["x"], t["y"], strict=True))
        for t in _figures(text)["fig-0-capacity"]["data"]
        if str(t.get("name", "")).startswith("predicted")
    }
    assert sorted(curve["predicted preemptions"]) == [8, 32, 64]
    assert curve["predicted preemptions"][32] == now["preemptions"]
    assert curve["predicted p99 (s)"][32] == pytest.approx(now["e2e_p99"], abs=1e-3)
    # Per class, the sweep's "now" rows are the JSON's per_priority of the advice's now, and
    # the observed rows say no preemption count ("—"), not 0.
    rows = _rows(section.group(0), "sweep")
    for cls, figures in now["per_priority"].items():
        got = rows[("max_num_seqs 32 (now)", cls)]
        assert got["requests"] == f"{figures['requests']:,}"
        assert got["preemptions"] == f"{figures['preemptions']:,}"
        assert got["e2e_p99"] == _seconds(figures["e2e_p99"])
        assert rows[("observed", cls)]["preemptions"] == "—"
    assert {cls for _, cls in rows} == {"0", "1"}
    # The JSON's whatif_sweep holds the same values the HTML shows.
    sweep = body["whatif_sweep"][dep["name"]]
    assert sweep["label"] == label.group(1) and sweep["current_max_num_seqs"] == 32
    point = next(p for p in sweep["points"] if p["max_num_seqs"] == 32)
    assert point["preemptions"] == now["preemptions"]
    assert point["per_priority"] == now["per_priority"]
    assert sweep["fidelity"]["verified"] == label.group(1).startswith("Verified")
    # The advice's own per-class table: now and each replayed suggestion, the JSON's values.
    advice_rows = _rows(text, "advice")
    for a in replayed:
        setting = f"#{a['rank']} {a['flag'] or a['action'].replace('_', ' ')} {a['suggested']}"
        for cls, figures in a["predicted"]["with_change"]["per_priority"].items():
            got = advice_rows[(setting, cls)]
            assert got["ttft_p99"] == _seconds(figures["ttft_p99"])
            assert got["preemptions"] == f"{figures['preemptions']:,}"


def test_the_sweep_prints_in_the_json_without_html(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", *_argv(MIX), "--json", "--whatif-sweep", "16"]) == 0
    body = json.loads(capsys.readouterr().out)
    (sweep,) = body["whatif_sweep"].values()
    assert [p["max_num_seqs"] for p in sweep["points"]] == [16, 32]
    assert set(sweep["observed_per_priority"]) == {"0", "1"}
    assert main(["report", *_argv(MIX), "--whatif-sweep", "16"]) == 2
    assert "give --html FILE or --json" in capsys.readouterr().err


def test_the_sweep_replays_the_closed_loops_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started from a step cost 40 % too slow, the sweep's replay is the closed loop's (not the
    open-loop fit's): its point at the current setting is the loop's replay of now."""
    real = observed.build_replay

    def slowed(*args: Any, **kwargs: Any) -> observed.Replay:
        replay = real(*args, **kwargs)
        cost = replay.config.step_cost
        assert cost is not None
        slow = dataclasses.replace(
            cost,
            per_step_s=cost.per_step_s * 1.4,
            per_decode_token_s=cost.per_decode_token_s * 1.4,
            per_prefill_token_s=cost.per_prefill_token_s * 1.4,
        )
        return dataclasses.replace(
            replay, config=dataclasses.replace(replay.config, step_cost=slow)
        )

    monkeypatch.setattr(report_command, "build_replay", slowed)
    item = load_inputs([str(MIX / "vllm.log")], [str(MIX / "metrics")],
                       [str(MIX / "requests.jsonl")])[0]  # fmt: skip
    dep = analyze_deployment(item, AnalysisParams())
    sweep, _ = whatif_sweep(item, dep, [8])
    assert sweep is not None
    assert sweep.loop.replays > 1 and sweep.loop.multipliers[0] < 1.0
    start = slowed(dep.capacity, observed.replay_inputs(item), preemptions=dep.preemptions.total)
    assert closed_loop(start).replay.config == sweep.loop.replay.config
    at_now = next(o for o in sweep.outcomes if o.settings["max_num_seqs"] == sweep.current)
    assert at_now == sweep.loop.now
    view = sweep.view()
    assert view["calibration"].startswith("closed loop over ")
    assert view["verified"] == sweep.loop.residual.verified
