"""The windows Prometheus reduces (analysis/fleet_reduce.py) against the raw snapshots.

Three servers over six hours of 15-s scrapes, backfilled into a real Prometheus: one with a
40-minute gap in its scrapes, one that restarts mid-window (its counters start again from 0),
and one whose preemption counter moves in steps of 50 (as V0's did). `report --prometheus`
must give every window exactly as `report --metrics` gives it from the same snapshots, at a
1-minute window (last_over_time) and a 5-minute one (the instant selector); a window without a
scrape has no count (null), never 0. Plus: the automatic window, and the range queries of a
batch of servers cost what those of one server cost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from preemptscope.analysis.fleet_reduce import Batch, auto_window
from preemptscope.ingest import promapi

from preemptscope.fleet import Fleet, FleetOptions, Server, plan_batches
from tests.fleet import fleetgen
from tests.fleet.conftest import FleetData, report_json

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOUR = 3600


@dataclass(frozen=True)
class Special:
    servers: list[fleetgen.FleetServer]
    snapshots: dict[str, Path]
    url: str
    start: str
    end: str


def _steps_of_50(text: str) -> str:
    def floor(match: re.Match[str]) -> str:
        return f"{match.group(1)}{math.floor(float(match.group(2)) / 50) * 50}.0"

    return re.sub(r"^(vllm:num_preemptions_total\{[^}]*\} )(\S+)$", floor, text, flags=re.M)


@pytest.fixture(scope="module")
def special(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Special]:
    if fleetgen.PROMETHEUS is None or fleetgen.PROMTOOL is None:
        pytest.skip("needs Debian's prometheus and promtool")
    root = tmp_path_factory.mktemp("special")
    base = fleetgen.build_fleet(servers=1, days=0.25, interval=15.0)[0]  # a surge at 4.5-5.5 h
    start = base.start

    def at(hours: float) -> datetime:
        return start + timedelta(hours=hours)

    gap = [(t, x) for t, x in base.rendered if not at(2) <= t < at(2 + 40 / 60)]
    # Up to 5 h 02 min, then the engine starts again (counters from 0) 97 s later, mid-window.
    before = [(t, x) for t, x in base.rendered if t < at(5 + 2 / 60)]
    again = timedelta(hours=5 + 2 / 60, seconds=97)
    after = [(t + again, x) for t, x in base.rendered if t + again <= at(6)]
    v0 = [(t, _steps_of_50(x)) for t, x in base.rendered]
    servers = [
        replace(base, namespace="edge", pod="gap", instance="10.1.0.1:8000", rendered=gap),
        replace(base, namespace="edge", pod="restart", instance="10.1.0.2:8000",
                rendered=before + after),
        replace(base, namespace="edge", pod="v0", instance="10.1.0.3:8000", rendered=v0),
    ]  # fmt: skip
    snapshots = {
        s.name: fleetgen.write_snapshots(s, root / "snapshots" / s.namespace / s.pod)
        for s in servers
    }
    fleetgen.write_openmetrics(servers, root / "history.om")
    fleetgen.backfill(root / "history.om", root / "tsdb")
    end = max(t for s in servers for t, _ in s.texts) + timedelta(seconds=1)
    with fleetgen.running_prometheus(root / "tsdb", root) as url:
        yield Special(servers, snapshots, url, start.isoformat(), end.isoformat())


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _both(special: Special, capsys: pytest.CaptureFixture[str], window: str) -> tuple[Any, Any]:
    common = ("--window", window, "--now", special.end)
    prom = report_json(capsys, "--prometheus", special.url, "--start", special.start,
                       "--end", special.end, *common)  # fmt: skip
    snaps = report_json(
        capsys, *(f"--metrics={path}={name}" for name, path in special.snapshots.items()), *common
    )
    return {d["name"]: d for d in prom["deployments"]}, {d["name"]: d for d in snaps["deployments"]}


@pytest.mark.parametrize("window", ["1m", "5m"])
def test_windows_as_the_snapshots_give_them(
    special: Special, capsys: pytest.CaptureFixture[str], window: str
) -> None:
    prom, snaps = _both(special, capsys, window)
    assert sorted(prom) == ["edge/gap", "edge/restart", "edge/v0"]
    for name, expected in snaps.items():
        got = prom[name]
        assert len(got["windows"]) == len(expected["windows"]), name
        for mine, theirs in zip(got["windows"], expected["windows"], strict=True):
            assert _close(mine, theirs), (name, mine["start"])
        for key in ("preemptions", "episodes", "capacity"):
            assert _close(got[key], expected[key]), (name, key)
        # The same restarts at the same scrapes (the message names the source).
        events = [[(e["time"], e["kind"]) for e in d["events"]] for d in (got, expected)]
        assert events[0] == events[1], name
        assert got["verdict"]["state"] == expected["verdict"]["state"]
    # The restart is seen, from the raw scrapes around it.
    restarts = [e for e in prom["edge/restart"]["events"] if "restarted" in e["message"]]
    assert len(restarts) == 1
    assert prom["edge/restart"]["preemptions"]["total"] > 0
    # A counter in steps of 50 is counted in whole steps, never extrapolated.
    counts = [w["preemptions"] for w in prom["edge/v0"]["windows"] if w["preemptions"]]
    assert counts and all(c % 50 == 0 for c in counts)


def test_a_window_without_scrapes_has_no_count(
    special: Special, capsys: pytest.CaptureFixture[str]
) -> None:
    prom, _ = _both(special, capsys, "5m")
    start = datetime.fromisoformat(special.start)
    gap = (start + timedelta(hours=2), start + timedelta(hours=2, minutes=40))
    when = datetime.fromisoformat
    inside = [
        w
        for w in prom["edge/gap"]["windows"]
        if gap[0] <= when(w["start"]) < when(w["end"]) < gap[1]
    ]
    assert len(inside) >= 6
    assert all(w["samples"] == 0 and w["preemptions"] is None for w in inside)
    assert all(w["kv_usage_max"] is None and w["running_max"] is None for w in inside)
    # The scrape at the gap's end closes the pair across it: the window ending there counts
    # that pair's increase (the snapshots do the same), though none of its own scrapes.
    (edge,) = [w for w in prom["edge/gap"]["windows"] if when(w["end"]) == gap[1]]
    assert edge["samples"] == 0 and edge["preemptions"] == 0
    scraped = [w for w in prom["edge/gap"]["windows"] if w["samples"]]
    assert all(w["preemptions"] is not None for w in scraped)  # 0 where nothing was preempted
    assert any(w["preemptions"] == 0 for w in scraped)


def test_the_automatic_window(
    fleet_data: FleetData, prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    day = datetime(2026, 11, 2, tzinfo=UTC)
    assert auto_window(day, day + timedelta(hours=1)) == 60
    assert auto_window(day, day + timedelta(days=1)) == 60
    assert auto_window(day, day + timedelta(days=2)) == 300
    assert auto_window(day, day + timedelta(days=7)) == 900
    assert auto_window(day, day + timedelta(days=30)) == 3600
    span = ("--start", fleet_data.start, "--end", fleet_data.end, "--selector", 'pod="chat-000"')
    auto = report_json(capsys, "--prometheus", prometheus, *span)  # two days: 5 minutes
    assert auto["parameters"]["window_s"] == 300
    assert auto["fleet"]["window_s"] == 300 and auto["fleet"]["window_automatic"]
    assert auto["fleet"]["assumptions"][0].startswith("windows of 5 min chosen for a 2-day range")
    first, second = auto["deployments"][0]["windows"][:2]
    step = datetime.fromisoformat(second["start"]) - datetime.fromisoformat(first["start"])
    assert step == timedelta(minutes=5)
    given = report_json(capsys, "--prometheus", prometheus, *span, "--window", "15m")
    assert given["parameters"]["window_s"] == 900 and not given["fleet"]["window_automatic"]
    assert given["fleet"]["assumptions"][0] == "windows of 15 min as --window asked"
    # The terminal report says so too.
    from preemptscope.cli import main

    capsys.readouterr()
    assert main(["report", "--prometheus", prometheus, *span]) == 0
    assert "assumed: windows of 5 min chosen" in capsys.readouterr().out


class _Counting(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_one_set_of_queries_per_batch_of_servers(fleet_data: FleetData, prometheus: str) -> None:
    def queries(selector: str | None) -> tuple[int, list[Batch], int]:
        transport = _Counting()
        client = promapi.PromClient(prometheus, transport=transport)
        start, end = (datetime.fromisoformat(t) for t in (fleet_data.start, fleet_data.end))
        options = FleetOptions(url=prometheus, start=start, end=end, selector=selector)
        with client, Fleet(options, client=client) as fleet:
            for name in fleet.groups:
                fleet.read(name)
            return len(fleet.groups), fleet.batches, transport.paths.count("/api/v1/query_range")

    many, batches, fleet_queries = queries(None)
    one, single, server_queries = queries('{pod="chat-000"}')
    assert (many, one, len(single)) == (len(fleet_data.servers), 1, 1)
    # Discovery is one series call; each batch's windows cost what one server's cost, and
    # every server is in exactly one batch, selected by its batch's matchers.
    assert 1 < len(batches) < many // 3
    assert fleet_queries == len(batches) * server_queries
    assert 0 < server_queries <= 20
    names = [name for batch in batches for name, _, _ in batch.servers]
    assert sorted(names) == sorted(s.name for s in fleet_data.servers)


def _server(name: str, matchers: tuple[tuple[str, str], ...], series: int = 99) -> Server:
    return Server(name, matchers, {}, ("vllm:num_requests_running",), series)


def test_batches_select_their_servers_only() -> None:
    pods = [_server(f"llm/p{i}.x", (("namespace", "llm"), ("pod", f"p{i}.x"))) for i in range(20)]
    batches = plan_batches(pods, windows=673)
    # 1, 2, 4, 8 servers, then as many as 600,000 window values allow (9 of 99 series).
    assert [len(b.servers) for b in batches] == [1, 2, 4, 8, 5]
    assert batches[1].matchers == 'namespace="llm",pod=~"p1\\\\.x|p2\\\\.x"'
    assert batches[1].series == 198
    # A server named by its instance has no pod label; one named by its job neither.
    mixed = [pods[0], _server("10.0.0.1:8000", (("instance", "10.0.0.1:8000"),)),
             _server("10.0.0.2:8000", (("instance", "10.0.0.2:8000"),)),
             _server("vllm", (("job", "vllm"),)), _server("prometheus", ())]  # fmt: skip
    plans = [(b.matchers, [n for n, _, _ in b.servers]) for b in plan_batches(mixed, 10)]
    assert plans == [
        ('namespace="llm",pod="p0.x"', ["llm/p0.x"]),
        ('instance=~"10\\\\.0\\\\.0\\\\.1:8000|10\\\\.0\\\\.0\\\\.2:8000",pod=""',
         ["10.0.0.1:8000", "10.0.0.2:8000"]),
        ('job="vllm",instance="",pod=""', ["vllm"]),
        ('instance="",job="",pod=""', ["prometheus"]),
    ]  # fmt: skip
    (alone,) = plan_batches([_server("x", (("pod", "x"),))], 1)
    assert alone.matchers == 'pod="x",namespace=""'  # (namespace, pod) would name it otherwise


class _Failing(_Counting):
    """Answers HTTP 503 to the range queries that select any of `pods`."""

    def __init__(self, pods: list[str]) -> None:
        super().__init__()
        self.pods = pods

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        query = request.url.params.get("query", "")
        if request.url.path == "/api/v1/query_range" and any(p in query for p in self.pods):
            return httpx.Response(503, text="overloaded", request=request)
        return super().handle_request(request)


def test_a_batch_that_fails_fails_its_reads(fleet_data: FleetData, prometheus: str) -> None:
    start, end = (datetime.fromisoformat(t) for t in (fleet_data.start, fleet_data.end))
    options = FleetOptions(url=prometheus, start=start, end=end)
    with promapi.PromClient(prometheus) as client, Fleet(options, client=client) as fleet:
        batches = [[name for name, _, _ in b.servers] for b in fleet.batches]
    assert len(batches) > 3

    def pods(batch: list[str]) -> list[str]:
        return [name.split("/")[1] for name in batch]  # chat-000, ...: none is in another

    # The first batch is waited for by Fleet(): its failure is Fleet()'s.
    client = promapi.PromClient(prometheus, transport=_Failing(pods(batches[0])))
    with client, pytest.raises(promapi.PrometheusError, match="HTTP 503"):
        Fleet(options, client=client)
    # A later batch's failure is raised by the reads of its servers, each of them.
    client = promapi.PromClient(prometheus, transport=_Failing(pods(batches[3])))
    with client, Fleet(options, client=client) as fleet:
        for name in batches[0] + batches[1]:
            assert fleet.read(name).reduced is not None
        for name in batches[3]:
            with pytest.raises(promapi.PrometheusError, match="HTTP 503"):
                fleet.read(name)
