"""The Grafana dashboard: fleet variables, per-server queries, value mappings, valid PromQL.

PromQL validity is checked by a real Prometheus (Debian's, on 127.0.0.1, empty TSDB): every
panel query, with Grafana's variables substituted, goes to /api/v1/query, where a parse error
is a 400.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from preemptscope.exporter.collector import VERDICT_STATES

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"
DASHBOARD: dict[str, Any] = json.loads((GRAFANA / "preemptscope.json").read_text())
PROMETHEUS = shutil.which("prometheus")
FLEET_VARIABLES = ("namespace", "pod", "instance")


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in DASHBOARD["templating"]["list"]}


def panels() -> list[dict[str, Any]]:
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels() for t in p["targets"]]


def test_fleet_variables_chain_and_default_to_all() -> None:
    found = variables()
    for name in (*FLEET_VARIABLES, "deployment", "model_name"):
        variable = found[name]
        assert variable["type"] == "query" and variable["datasource"]["uid"] == "${datasource}"
        assert variable["includeAll"] and variable["multi"]
        # All must match series without the label too (outside Kubernetes, no namespace/pod).
        assert variable["allValue"] == ".*"
        assert variable["query"]["query"].startswith("label_values(")
    # Each narrows the next: namespace -> pod -> instance -> deployment / model.
    order = [v["name"] for v in DASHBOARD["templating"]["list"]]
    assert order == ["datasource", *FLEET_VARIABLES, "deployment", "model_name"]
    for later, earlier in (("pod", "namespace"), ("instance", "pod"), ("deployment", "instance")):
        assert f'=~"${earlier}"' in found[later]["query"]["query"], later


def test_every_query_is_per_server_and_filtered_by_the_fleet_variables() -> None:
    for title, expr in queries():
        for name in FLEET_VARIABLES:
            assert f'{name}=~"${name}"' in expr, f"{title}: no {name} filter in {expr}"
        # An aggregation keeps the target's identity: a saturated replica never blends
        # into an idle one.
        for kept in re.findall(r"\b(?:sum|max|min|avg) by \(([^)]*)\)", expr):
            labels = {label.strip() for label in kept.split(",")}
            assert {"namespace", "pod", "instance"} <= labels, f"{title}: by ({kept})"


def test_the_itl_panel_reads_the_old_name_too() -> None:
    (panel,) = [p for p in panels() if "inter-token" in p["title"]]
    for target in panel["targets"]:
        assert "vllm:inter_token_latency_seconds" in target["expr"]
        assert "vllm:time_per_output_token_seconds" in target["expr"]
        # The new name first: where both exist, `or` keeps the left side only.
        expr = target["expr"]
        assert expr.index("inter_token_latency") < expr.index("time_per_output_token")


def mapped(panel: dict[str, Any]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for mapping in panel["fieldConfig"]["defaults"]["mappings"]:
        assert mapping["type"] == "value"
        texts.update({value: option["text"] for value, option in mapping["options"].items()})
    return texts


def test_state_panels_map_values_to_words() -> None:
    verdict = next(p for p in panels() if p["type"] == "state-timeline")
    texts = mapped(verdict)
    # Every state the collector exports has a code in the query and a word in the mapping.
    codes = dict(
        re.findall(
            r'preemptscope_verdict="(\w+)"\} == 1\) \* 0 \+ (-?\d+)', verdict["targets"][0]["expr"]
        )
    )
    assert set(codes) == set(VERDICT_STATES)
    assert {texts[code] for code in codes.values()} == {s.replace("_", " ") for s in VERDICT_STATES}
    over = next(p for p in panels() if p["title"] == "Over capacity")
    assert mapped(over) == {"0": "ok", "1": "over capacity"}


def test_the_dashboard_reads_the_one_source_rate_of_the_rules() -> None:
    rules = (ROOT / "dashboards" / "prometheus" / "rules.yml").read_text()
    used = {name for _, expr in queries() for name in re.findall(r"\b\w+:\w+:\w+\b", expr)}
    assert used, "no recording rule on the dashboard"
    for name in used:
        assert f"- record: {name}\n" in rules, name


def test_provisioning_ships_in_the_wheel() -> None:
    """Every file under dashboards/grafana and dashboards/prometheus matches a package-data glob."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["preemptscope.dashboards"]
    base = ROOT / "dashboards"
    shipped = {path for pattern in patterns for path in base.glob(pattern) if path.is_file()}
    for folder in ("grafana", "prometheus"):
        for path in (base / folder).rglob("*"):
            if path.is_file():
                assert path in shipped, f"{path.relative_to(ROOT)} is not in the wheel"


# -- PromQL validity against a real Prometheus -------------------------------------------------


def substitute(expr: str) -> str:
    """What Grafana sends: variables replaced by their All value, intervals by a duration."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    if PROMETHEUS is None:
        pytest.skip("needs Debian's prometheus binary")
    directory = tmp_path_factory.mktemp("prometheus")
    (directory / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(directory / "prometheus.err").open("w"),
    )
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.get("/-/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (directory / "prometheus.err").read_text()
            time.sleep(0.2)
        yield client
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def status(client: httpx.Client, expr: str) -> tuple[int, str]:
    response = client.get("/api/v1/query", params={"query": expr})
    return response.status_code, response.text


@pytest.mark.integration
def test_every_query_parses_in_prometheus(prometheus: httpx.Client) -> None:
    # The check can fail: a broken query is refused.
    code, _ = status(prometheus, "sum by (pod (up)")
    assert code == 400
    exprs = [expr for _, expr in queries()]
    exprs += [a["expr"] for a in DASHBOARD["annotations"]["list"] if "expr" in a]
    for variable in variables().values():
        if variable["type"] == "query":
            selector = re.fullmatch(r"label_values\((.*), \w+\)", variable["query"]["query"])
            assert selector, variable["name"]
            exprs.append(f"count({selector[1]})")
    for expr in exprs:
        code, body = status(prometheus, substitute(expr))
        assert code == 200, f"{expr}\n-> {body}"


def panel_expr(title: str, ref: str = "A") -> str:
    panel = next(p for p in panels() if p["title"] == title)
    return substitute(next(t["expr"] for t in panel["targets"] if t["refId"] == ref))


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_the_verdict_and_itl_queries_compute_what_the_panels_say(tmp_path: Path) -> None:
    """Evaluated by promtool on series labelled like two scraped replicas."""
    target = 'job="preemptscope",namespace="llm",instance="10.0.0.{n}:18700",pod="chat-{n}"'
    series = []
    for n, state in ((1, "over_capacity"), (2, "ok"), (3, "insufficient_data"), (4, "at_risk")):
        for candidate in VERDICT_STATES:
            labels = target.format(n=n) + f',deployment="llm/chat-{n}",'
            value = "1" if candidate == state else "0"
            series.append(
                {
                    "series": f'preemptscope_verdict{{{labels}preemptscope_verdict="{candidate}"}}',
                    "values": f"{value}x5",
                }
            )
    vllm = 'job="vllm",namespace="llm",pod="vllm-{n}",instance="10.0.0.{n}:8000",model_name="m"'
    # vllm-1 exports both ITL names (V1 up to v0.11): read once, under the new name (1 s mean);
    # vllm-2 only the old one (0.5 s mean).
    for n, names in (
        (1, ("inter_token_latency", "time_per_output_token")),
        (2, ("time_per_output_token",)),
    ):
        for name in names:
            mean = 1.0 if n == 1 and name == "inter_token_latency" else 0.5
            for suffix, step in (("sum", 60 * mean), ("count", 60)):
                series.append(
                    {
                        "series": f"vllm:{name}_seconds_{suffix}{{{vllm.format(n=n)}}}",
                        "values": f"0+{step}x5",
                    }
                )
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": panel_expr("Verdict"),
                        "eval_time": "4m",
                        "exp_samples": [
                            {
                                "labels": (
                                    f'{{namespace="llm",pod="chat-{n}",'
                                    f'instance="10.0.0.{n}:18700",deployment="llm/chat-{n}"}}'
                                ),
                                "value": code,
                            }
                            for n, code in ((1, 2), (2, 0), (3, -1), (4, 1))
                        ],
                    },
                    {
                        "expr": panel_expr("vLLM inter-token latency: p99 vs mean", "B"),
                        "eval_time": "4m",
                        "exp_samples": [
                            {
                                "labels": (
                                    f'{{namespace="llm",pod="vllm-{n}",'
                                    f'instance="10.0.0.{n}:8000",model_name="m"}}'
                                ),
                                "value": mean,
                            }
                            for n, mean in ((1, 1.0), (2, 0.5))
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "rules.yml").write_text("groups: []\n")
    (tmp_path / "test.yml").write_text(json.dumps(tests))
    run = subprocess.run(
        ["promtool", "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
