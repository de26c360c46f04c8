"""`report --prometheus` against a real Prometheus holding two days of a simulated fleet: every
server found and named namespace/pod, and the same verdicts, preemption totals and episodes
as `report --metrics` on the very snapshots that were backfilled."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.conftest import WINDOW, FleetData, report_error, report_json

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _summary(deployment: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": deployment["verdict"]["state"],
        "total": deployment["preemptions"]["total"],
        "windows_with_preemption": deployment["preemptions"]["windows_with_preemption"],
        "episodes": [(e["start"], e["end"], e["preemptions"]) for e in deployment["episodes"]],
        "evidence": sorted(e["code"] for e in deployment["verdict"]["evidence"]),
        "kv_cache_tokens": deployment["capacity"]["kv_cache_tokens"],
    }


def test_every_server_with_the_verdicts_of_its_snapshots(
    fleet_data: FleetData, prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ("--window", WINDOW, "--now", fleet_data.end)
    fleet = report_json(
        capsys, "--prometheus", prometheus, "--start", fleet_data.start, "--end", fleet_data.end,
        *common,
    )  # fmt: skip
    snapshots = report_json(
        capsys, *(f"--metrics={path}={name}" for name, path in fleet_data.snapshots.items()),
        *common,
    )  # fmt: skip
    by_name = {d["name"]: d for d in fleet["deployments"]}
    assert sorted(by_name) == sorted(s.name for s in fleet_data.servers)
    expected = {d["name"]: _summary(d) for d in snapshots["deployments"]}
    assert {name: _summary(d) for name, d in by_name.items()} == expected
    states = [s["state"] for s in expected.values()]
    # The fleet is mixed: some over capacity now, some only earlier, some healthy.
    assert {"over_capacity", "at_risk", "ok"} <= set(states)
    assert all(s["total"] > 0 for n, s in expected.items() if "chat" in n)
    # The fleet object lists every server, worst first, from the same values.
    rows = fleet["fleet"]["servers"]
    assert [r["name"] for r in rows][: states.count("over_capacity")] == sorted(
        (n for n, s in expected.items() if s["state"] == "over_capacity"),
        key=lambda n: (-expected[n]["total"], n),
    )
    for row in rows:
        assert row["preemptions"] == expected[row["name"]]["total"]
        assert row["verdict"] == expected[row["name"]]["state"]
        assert row["model_name"] == "llama-8b"
        assert row["replicas"] == [row["name"]]
    # Chunked reads lose and repeat no scrape.
    scrapes = {s["deployment"]: s["records"]["scrapes"] for s in fleet["sources"]}
    assert scrapes == {s.name: len(s.rendered) for s in fleet_data.servers}
    # Each source names the server's selector on that Prometheus.
    sources = {s["deployment"]: s["path"] for s in fleet["sources"]}
    namespace, pod = ["llm", "chat-000"]
    assert sources["llm/chat-000"] == f'{prometheus} {{namespace="{namespace}",pod="{pod}"}}'


def _last_hours(fleet_data: FleetData, hours: float) -> tuple[str, ...]:
    end = datetime.fromisoformat(fleet_data.end)
    start = (end - timedelta(hours=hours)).isoformat()
    return ("--start", start, "--end", fleet_data.end, "--window", WINDOW)


def test_selector_and_group_by(
    fleet_data: FleetData, prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    span = _last_hours(fleet_data, 4)  # the last surge
    each = report_json(capsys, "--prometheus", prometheus, *span, "--selector", 'pod=~"chat-.*"')
    totals = {d["name"]: d["preemptions"]["total"] for d in each["deployments"]}
    assert sorted(totals) == sorted(s.name for s in fleet_data.servers if "chat" in s.pod)
    llm = report_json(capsys, "--prometheus", prometheus, *span, "--selector", '{namespace="llm"}')
    assert sorted(d["name"] for d in llm["deployments"]) == sorted(
        s.name for s in fleet_data.servers if s.namespace == "llm"
    )
    grouped = report_json(
        capsys, "--prometheus", prometheus, *span, "--group-by", "namespace",
        "--selector", 'pod=~"chat-.*"',
    )  # fmt: skip
    assert sorted(d["name"] for d in grouped["deployments"]) == ["batch", "llm"]
    for d in grouped["deployments"]:
        members = [n for n in totals if n.startswith(d["name"] + "/chat-")]
        # Replicas are separate series: their counters add up, never reset one another.
        assert d["preemptions"]["total"] == sum(totals[n] for n in members)
        assert d["verdict"]["state"] == "over_capacity"
        row = next(r for r in grouped["fleet"]["servers"] if r["name"] == d["name"])
        assert row["replicas"] == sorted(members)


def test_terminal_and_html_put_the_fleet_first(
    fleet_data: FleetData, prometheus: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from preemptscope.cli import main

    html = tmp_path / "fleet.html"
    argv = ["report", "--prometheus", prometheus, *_last_hours(fleet_data, 2),
            "--selector", '{namespace="batch"}', "--html", str(html)]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.index("Fleet: 10 deployments") < out.index("Sources")
    page = html.read_text()
    assert page.index('id="fleet"') < page.index("<h3>Deployments</h3>")
    for server in fleet_data.servers:
        assert (server.name in page) == (server.namespace == "batch")


def test_errors_are_one_line(
    fleet_data: FleetData, prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    span = _last_hours(fleet_data, 1)
    line = report_error(capsys, "--prometheus", prometheus, *span, "--selector", '{namespace="x"}')
    assert "no vLLM server matching" in line
    line = report_error(capsys, "--prometheus", prometheus, *span, "--selector", '{pod=~"("}')
    assert "bad_data" in line
    line = report_error(capsys, "--prometheus", prometheus, "--since", "1h")
    assert "no vLLM server" in line  # the history is in the past
    line = report_error(capsys, "--prometheus", f"{prometheus}/nothing-here", *span)
    assert "HTTP 404" in line
    line = report_error(capsys, "--prometheus", prometheus, *span, "--group-by", "a-b")
    assert "not a Prometheus label name" in line
    line = report_error(capsys, "--selector", '{namespace="llm"}', "x.log")
    assert "give --prometheus URL too" in line


def test_logs_join_their_server_by_name(
    fleet_data: FleetData, prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "v0_6_preemption.log"
    span = _last_hours(fleet_data, 1)
    selector = ("--selector", '{namespace="llm",pod=~"chat-00.*"}')
    joined = report_json(
        capsys, "--prometheus", prometheus, *span, *selector, f"{log}=llm/chat-000", "--year",
        "2026",
    )  # fmt: skip
    kinds = {
        d["name"]: sorted(s["kind"] for s in joined["sources"] if s["deployment"] == d["name"])
        for d in joined["deployments"]
    }
    assert kinds["llm/chat-000"] == ["log", "metrics"]
    assert all(k == ["metrics"] for n, k in kinds.items() if n != "llm/chat-000")
    line = report_error(capsys, "--prometheus", prometheus, *span, *selector, f"{log}=llm/nope")
    assert "llm/nope: no server of that name" in line
