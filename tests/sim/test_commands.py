"""`preemptscope demo` and `preemptscope whatif` end to end (real files, real report pipeline)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.scenarios import chat_traffic
from preemptscope.analysis.sim.whatif import predict, sweep, with_memory_change

from preemptscope.cli import main


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--out", str(out), "--duration", "6m", "--json"]) == 0
    return out


def test_demo_writes_every_artefact(demo_dir: Path) -> None:
    for name in ("chat-a10g", "chat-a100"):
        d = demo_dir / name
        assert (d / "vllm.log").stat().st_size > 0
        assert len(list((d / "metrics").glob("metrics-*.prom"))) >= 20
        bench = json.loads((d / "bench.json").read_text())
        assert bench["completed"] > 0 and len(bench["latencies"]) == bench["num_prompts"]
        truth = json.loads((d / "ground-truth.json").read_text())
        assert truth["schema"] == "preemptscope-sim-ground-truth/1"


def test_demo_verdicts_match_ground_truth(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(demo_dir), "--duration", "6m", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    states = {d["name"]: d["verdict"]["state"] for d in report["deployments"]}
    truth = {
        name: json.loads((demo_dir / name / "ground-truth.json").read_text()) for name in states
    }
    assert truth["chat-a10g"]["over_capacity"] and states["chat-a10g"] == "over_capacity"
    assert not truth["chat-a100"]["over_capacity"] and states["chat-a100"] == "ok"
    counted = {d["name"]: d["preemptions"]["total"] for d in report["deployments"]}
    assert counted["chat-a10g"] == truth["chat-a10g"]["totals"]["preemptions"]


def test_demo_json_is_what_report_prints(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(demo_dir), "--duration", "6m", "--json"]) == 0
    from_demo = json.loads(capsys.readouterr().out)
    names = ("chat-a10g", "chat-a100")
    argv = ["report", *(f"{demo_dir / n / 'vllm.log'}={n}" for n in names), "--json"]
    for name in names:
        d = demo_dir / name
        argv += ["--metrics", f"{d / 'metrics'}={name}", "--bench", f"{d / 'bench.json'}={name}"]
    assert main(argv) == 0
    from_report = json.loads(capsys.readouterr().out)
    for body in (from_demo, from_report):
        body.pop("generated_at", None)
    assert from_demo == from_report


def test_demo_is_deterministic(tmp_path: Path) -> None:
    for run in ("a", "b"):
        assert main(["demo", "--out", str(tmp_path / run), "--duration", "6m", "--json"]) == 0
    for name in ("chat-a10g/vllm.log", "chat-a10g/bench.json", "chat-a100/ground-truth.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("era", ["v0", "v1-preemptions"])
def test_demo_other_eras_count_preemptions(
    tmp_path: Path, era: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path), "--duration", "6m", "--era", era, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    a10g = next(d for d in report["deployments"] if d["name"] == "chat-a10g")
    assert a10g["verdict"]["state"] == "over_capacity"
    log = (tmp_path / "chat-a10g" / "vllm.log").read_text()
    if era == "v0":
        assert "total_num_cumulative_preemption=1\n" in log
    else:
        assert "Preemptions: " in log


def test_whatif_cli_on_demo_files(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = demo_dir / "chat-a10g" / "vllm.log"
    argv = ["whatif", "--log", str(log), "--gpu", "A10G", "--gpu-memory-utilization", "0.95"]
    assert main([*argv, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    now, new = body["whatif"]["baseline"], body["whatif"]["candidate"]
    assert now["num_gpu_blocks"] == 1660  # calibrated to the log's KV cache size
    assert new["kv_cache_tokens"] > now["kv_cache_tokens"]
    assert now["preemptions"] > 0
    # Preemptions are not monotonic in KV size (more room admits more requests), but
    # enough room for the whole surge ends them.
    bench = demo_dir / "chat-a10g" / "bench.json"
    roomy = [
        "whatif",
        "--log",
        str(log),
        "--bench",
        str(bench),
        "--num-gpu-blocks-override",
        "5000",
    ]
    assert main([*roomy, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["whatif"]["candidate"]["preemptions"] == 0
    assert main(["whatif", "--bench", str(bench), "--gpu", "A10G", "--max-num-seqs", "16"]) == 0
    out = capsys.readouterr().out
    assert "What if max_num_seqs=16?" in out
    # A bench file alone shows no KV cache: the output says what it assumed.
    assert "KV cache not shown" in out and "Observed vs replayed now" in out


def test_whatif_replays_the_demo_to_its_own_counts(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the over-capacity deployment's log, /metrics and bench alone (issue 11)."""
    d = demo_dir / "chat-a10g"
    argv = ["whatif", "--log", str(d / "vllm.log"), "--metrics", str(d / "metrics")]
    argv += ["--bench", str(d / "bench.json"), "--max-num-seqs", "16", "--json"]
    assert main(argv) == 0
    body = json.loads(capsys.readouterr().out)
    truth = json.loads((d / "ground-truth.json").read_text())["totals"]["preemptions"]
    now, observed = body["whatif"]["baseline"], body["observed"]
    assert observed["preemptions"] == truth > 0
    assert abs(now["preemptions"] - truth) <= 0.3 * truth
    assert now["output_throughput"] == pytest.approx(observed["output_throughput"], rel=0.10)
    assert now["e2e_p99"] == pytest.approx(observed["e2e_p99"], rel=0.15)
    assert body["step_cost"]["basis"].split(" (")[0].split(";")[0].endswith("requests' TPOT")
    assert body["assumptions"] == []  # everything came from the data


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--max-model-len", "10"], "requests are longer"),
        (["--tensor-parallel-size", "3"], "32 attention heads"),
        (["--block-size", "7"], "--block-size 7"),
        (["--gpu-memory-utilization", "1.5"], "must be in (0, 1]"),
    ],
)
def test_whatif_refuses_values_vllm_refuses(
    demo_dir: Path, flag: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = demo_dir / "chat-a10g" / "bench.json"
    assert main(["whatif", "--bench", str(bench), *flag]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_whatif_needs_a_change(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = demo_dir / "chat-a10g" / "bench.json"
    assert main(["whatif", "--bench", str(bench)]) == 2
    assert "nothing to change" in capsys.readouterr().err


def test_whatif_more_memory_means_fewer_preemptions() -> None:
    workload = chat_traffic(rate=1.0, duration=180, seed=9)
    base = SimConfig(gpu=GPU_PRESETS["A10G"], max_num_seqs=128)
    result = predict(workload, {"gpu_memory_utilization": 0.97}, base=base)
    assert result.baseline.preemptions > 0
    assert result.candidate.kv_cache_tokens > result.baseline.kv_cache_tokens
    assert result.candidate.preemptions < result.baseline.preemptions
    curve = sweep(workload, "max_num_seqs", [4, 128], base=base)
    assert curve[0].preemptions == 0 < curve[1].preemptions


def test_calibrated_memory_change_moves_blocks_like_vllm() -> None:
    base = SimConfig(gpu=GPU_PRESETS["A10G"], num_gpu_blocks_override=1000)
    changed = with_memory_change(base, {"gpu_memory_utilization": 0.95})
    extra_gib = 0.05 * GPU_PRESETS["A10G"].memory_gib
    expected = 1000 + extra_gib * 2**30 / (131072 * 16)
    assert changed.num_gpu_blocks_override == pytest.approx(expected, abs=1)
    assert np.isclose(changed.gpu_memory_utilization, 0.95)


def _live_verdicts(demo_dir: Path, argv: list[str], now: datetime) -> dict[str, str]:
    """What `preemptscope serve ARGV` would say at `now`, through its settings and live state."""
    from preemptscope.exporter.live import LiveState
    from preemptscope.ingest.logs import ParseOptions, parse_path

    from preemptscope import settings
    from preemptscope.cli import build_parser

    config = settings.resolve(build_parser().parse_args(argv), environ={})
    live = LiveState(
        [t.deployment for t in config.logs],
        window_s=config.window,
        history_s=config.history,
        clock=config.clock,
        params={"min_episode_s": config.min_episode, "stale_after_s": config.resolve_after},
    )
    for target in config.logs:
        options = ParseOptions(reference_time=now)
        live.add_log_batch(parse_path(target.path, deployment=target.deployment, options=options))
    report = live.analyze_now(now)
    return {d.name: d.verdict.state for d in report.deployments}


def test_demo_serve_argv_makes_the_live_verdict_match_the_report(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from preemptscope.commands.demo import DEFAULT_START, Artefacts, serve_argv

    assert main(["demo", "--out", str(demo_dir), "--duration", "6m", "--json"]) == 0
    batch = {
        d["name"]: d["verdict"]["state"] for d in json.loads(capsys.readouterr().out)["deployments"]
    }
    assert batch["chat-a10g"] == "over_capacity"
    artefacts = []
    for name in ("chat-a10g", "chat-a100"):
        d = demo_dir / name
        files = (d / "vllm.log", d / "metrics", d / "bench.json", d / "ground-truth.json")
        artefacts.append(Artefacts(name, d, *files, truth={}))
    argv = serve_argv(artefacts, state_dir=demo_dir / "state", port=0)
    assert argv[argv.index("--resolve-after") + 1] == "3600s"
    assert argv.count("--log") == 2 and argv[-2:] == ["--port", "0"]
    # The demo's logs are finished files: quiet inputs must not turn /readyz 503.
    from preemptscope import settings
    from preemptscope.cli import build_parser

    assert settings.resolve(build_parser().parse_args(argv), environ={}).ready_after == 86400
    # `demo --serve` ends the traffic a minute before now; the page is watched for minutes after.
    start = datetime.fromisoformat(DEFAULT_START)
    later = start + timedelta(minutes=6 + 5)
    for now in (start + timedelta(minutes=6 + 1), later):
        assert _live_verdicts(demo_dir, argv, now) == batch
    # Without it, the service's alerting default (2 min after the last over-capacity window)
    # calls the A10G only at risk once the surge is a few minutes old.
    i = argv.index("--resolve-after")
    assert _live_verdicts(demo_dir, argv[:i] + argv[i + 2 :], later)["chat-a10g"] == "at_risk"


Traces = dict[str, dict[str, list[float]]]  # trace name -> {"x": [...], "y": [...]}


def _whatif_traces(html_path: Path) -> dict[str, Traces]:
    """Per capacity figure of an HTML report: the what-if traces' x and y, by trace name."""
    text = html_path.read_text(encoding="utf-8")
    marker = '<script type="application/json" id="preemptscope-figures">'
    body = text.split(marker, 1)[1].split("</script>", 1)[0]
    figures = json.loads(body)
    return {
        fig_id: {
            trace["name"]: {"x": list(trace["x"]), "y": list(trace["y"])}
            for trace in figure["data"]
            if str(trace.get("name", "")).startswith("predicted")
        }
        for fig_id, figure in figures.items()
        if fig_id.endswith("-capacity")
    }


def test_demo_html_draws_the_whatif_curve(demo_dir: Path) -> None:
    from preemptscope.commands.demo import WHATIF_SWEEP

    traces = _whatif_traces(demo_dir / "report.html")
    a10g, a100 = traces["fig-0-capacity"], traces["fig-1-capacity"]  # report order
    values = sorted({*WHATIF_SWEEP, 128})
    for curve in (a10g, a100):
        assert curve["predicted preemptions"]["x"] == values
        assert curve["predicted p99 (s)"]["x"] == values
    preempted = dict(zip(values, a10g["predicted preemptions"]["y"], strict=True))
    truth = json.loads((demo_dir / "chat-a10g" / "ground-truth.json").read_text())
    # At its own setting the replay is the simulation the files came from.
    assert preempted[128] == truth["totals"]["preemptions"] > 0
    assert preempted[8] == 0  # a small batch never outgrows the A10G's KV cache
    assert a100["predicted preemptions"]["y"] == [0] * len(values)


def test_report_whatif_sweep_replays_the_bench_file(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a10g, a100 = demo_dir / "chat-a10g", demo_dir / "chat-a100"
    html = tmp_path / "report.html"
    argv = [
        "report",
        f"{a10g / 'vllm.log'}=chat-a10g",
        f"{a100 / 'vllm.log'}=chat-a100",
        "--bench",
        f"{a10g / 'bench.json'}=chat-a10g",
        "--html",
        str(html),
        "--whatif-sweep",
        "8,32",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    traces = _whatif_traces(html)
    curve = traces["fig-0-capacity"]["predicted preemptions"]
    assert curve["x"] == [8, 32, 128]  # the current max_num_seqs (from the log) is added
    # The bench file's requests on the log's KV blocks, with the step cost fitted from their
    # own timings, reproduce the simulated deployment (no zeros, no preset).
    truth = json.loads((a10g / "ground-truth.json").read_text())["totals"]["preemptions"]
    assert curve["y"][0] == 0 and abs(curve["y"][2] - truth) <= 0.3 * truth
    # chat-a100 has no bench file: its log's request lines are replayed instead.
    assert traces["fig-1-capacity"]["predicted preemptions"]["y"] == [0, 0, 0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--whatif-sweep", "8,16"], "give --html"),
        (["--whatif-sweep", "8,x", "--html", "r.html"], "expected integers"),
        (["--whatif-sweep", "0", "--html", "r.html"], ">= 1"),
    ],
)
def test_report_whatif_sweep_refuses_bad_flags(
    demo_dir: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = demo_dir / "chat-a10g" / "vllm.log"
    assert main(["report", str(log), *extra]) == 2
    assert message in capsys.readouterr().err
