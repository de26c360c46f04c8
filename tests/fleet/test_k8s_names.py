"""Identity that survives a fleet: kubelet log paths and the downward API name `namespace/pod`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from preemptscope.ingest.k8s import downward_api_name, name_from_log_path

from preemptscope import settings
from preemptscope.cli import main
from preemptscope.inputs import split_spec, stem

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "v0_6_preemption.log"
UID = "3f2c1a9e-7b1d-4c55-9a0e-0d7c2b8e4f11"
CID = "a" * 64


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (f"/var/log/pods/llm_chat-7d9f-x2_{UID}/vllm/0.log", "llm/chat-7d9f-x2"),
        (f"/var/log/pods/llm_chat-0_{UID}/vllm/3.log.20261101-120000.gz", "llm/chat-0"),
        (f"/var/log/pods/llm_chat-0_{UID}/vllm/0.log.20261101-120000", "llm/chat-0"),
        (f"/var/log/containers/chat-0_llm_vllm-{CID}.log", "llm/chat-0"),
        (f"logs/batch_big-1_{UID}/vllm/0.log", "batch/big-1"),  # copied off the node
        ("/var/log/vllm/0.log", None),
        (f"/var/log/pods/llm_chat_0_{UID}/vllm/0.log", None),  # not a pod directory
        (f"/var/log/containers/chat-0_llm_vllm-{CID[:12]}.log", None),
        ("vllm.log", None),
    ],
)
def test_kubelet_paths(path: str, name: str | None) -> None:
    assert name_from_log_path(path) == name
    assert stem(path) == (name or stem(path))
    if name is not None:
        assert settings.parse_log_target(path).deployment == name


def test_stem_of_a_plain_log_is_unchanged() -> None:
    assert stem("/var/log/vllm/0.log") == "0"
    assert stem("/data/vllm.log.1") == "vllm"


def test_downward_api() -> None:
    assert downward_api_name({"POD_NAME": "chat-0", "POD_NAMESPACE": "llm"}) == "llm/chat-0"
    assert downward_api_name({"POD_NAME": "chat-0"}) == "chat-0"
    assert downward_api_name({"POD_NAMESPACE": "llm"}) is None
    assert downward_api_name({}) is None


def test_sidecar_log_and_scrape_join_under_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "chat-0")
    monkeypatch.setenv("POD_NAMESPACE", "llm")
    log = settings.parse_log_target("/logs/vllm.log")
    scrape = settings.parse_scrape_target("http://127.0.0.1:8000/metrics")
    assert log.deployment == scrape.deployment == "llm/chat-0"
    # An explicit name wins, and a kubelet path names its own pod, not the sidecar's.
    assert settings.parse_log_target("/logs/vllm.log=other").deployment == "other"
    assert settings.parse_log_target("/logs/vllm.log=llm/chat-9").deployment == "llm/chat-9"
    kubelet = f"/var/log/pods/batch_big-1_{UID}/vllm/0.log"
    assert settings.parse_log_target(kubelet).deployment == "batch/big-1"


def test_without_downward_api_names_stay_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    assert settings.parse_log_target("/logs/vllm.log").deployment == "vllm"
    scrape = settings.parse_scrape_target("http://127.0.0.1:8000/metrics")
    assert scrape.deployment == "127.0.0.1:8000"


def test_report_names_two_pods_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for pod in ("chat-0", "chat-1"):
        target = tmp_path / "var/log/pods" / f"llm_{pod}_{UID}" / "vllm" / "0.log"
        target.parent.mkdir(parents=True)
        shutil.copy(LOG, target)
        paths.append(str(target))
    assert main(["report", "--json", *paths]) == 0
    names = [d["name"] for d in json.loads(capsys.readouterr().out)["deployments"]]
    assert names == ["llm/chat-0", "llm/chat-1"]


def test_a_log_joins_a_server_by_namespace_pod(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("x\n")
    assert split_spec(f"{log}=llm/chat-0") == (str(log), "llm/chat-0")
    assert split_spec(f"{tmp_path}/missing.log=llm/chat-0")[1] is None
