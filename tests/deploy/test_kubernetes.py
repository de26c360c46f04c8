"""deploy/kubernetes/: rendered by the real kustomize, validated against real schemas.

Core kinds against the Kubernetes 1.30 OpenAPI schemas (kubernetes-validate, strict: unknown
fields fail), the Prometheus operator's kinds against its CRDs (tests/deploy/crds/, v0.93.0).
The container arguments go through preemptscope's own `serve` parser, the generated
PrometheusRule through promtool, and the vLLM logging config through logging.dictConfig and
preemptscope's log parser.
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from preemptscope.ingest.logs import parse_lines

from preemptscope import settings
from preemptscope.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
CRDS = Path(__file__).resolve().parent / "crds"
KUBERNETES = "1.30"
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def kustomizations() -> list[Path]:
    """Every folder kustomize can build (components are built through the examples)."""
    found = []
    for path in sorted(KUBE.rglob("kustomization.yaml")):
        if yaml.safe_load(path.read_text()).get("kind") != "Component":
            found.append(path.parent)
    return found


def render(folder: Path) -> list[dict[str, Any]]:
    run = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return [doc for doc in yaml.safe_load_all(run.stdout) if doc]


_rendered: dict[Path, list[dict[str, Any]]] = {}


def rendered(folder: Path) -> list[dict[str, Any]]:
    if folder not in _rendered:
        _rendered[folder] = render(folder)
    return _rendered[folder]


def objects(kind: str, folder: Path) -> list[dict[str, Any]]:
    return [doc for doc in rendered(folder) if doc["kind"] == kind]


def one(kind: str, folder: Path, name: str | None = None) -> dict[str, Any]:
    found = [d for d in objects(kind, folder) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name} in {folder}: {len(found)}"
    return found[0]


FOLDERS = kustomizations()
EXAMPLES = KUBE / "examples"
SIDECAR = EXAMPLES / "vllm-sidecar"
FLEET = EXAMPLES / "fleet"


def test_the_layout_is_what_the_docs_say() -> None:
    names = {str(f.relative_to(KUBE)) for f in FOLDERS}
    assert names == {"central", "monitoring", "examples/fleet", "examples/vllm-sidecar"}
    component = yaml.safe_load((KUBE / "sidecar" / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"


# -- schemas ---------------------------------------------------------------------------------


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            key = (f"{group}/{version['name']}", kind)
            schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


CRD_SCHEMAS = _crd_schemas()


def _unknown_fields(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """What the API server would prune: fields a structural schema does not declare."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                yield f"{path}.{key}"
            else:
                yield from _unknown_fields(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            yield from _unknown_fields(item, schema["additionalProperties"], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from _unknown_fields(item, schema["items"], f"{path}[{index}]")


def validate(doc: dict[str, Any]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        schema = CRD_SCHEMAS[key]
        # Not check_schema: the operator's CRDs hold Go regexes ((?i) mid-pattern) that
        # Python's metaschema check refuses; no shipped field uses those patterns.
        jsonschema.Draft7Validator(schema).validate(doc)
        unknown = list(_unknown_fields(doc, schema, doc["kind"]))
        assert not unknown, f"fields the CRD does not know: {unknown}"
    else:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@needs_kubectl
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(KUBE)))
def test_every_manifest_renders_and_validates(folder: Path) -> None:
    docs = rendered(folder)
    assert docs
    for doc in docs:
        validate(doc)


def test_the_validators_reject_what_a_cluster_would() -> None:
    """The checks can fail: a misspelt field, a wrong type, an unknown CRD field."""
    deployment = yaml.safe_load((KUBE / "central" / "deployment.yaml").read_text())
    deployment["spec"]["selector"] = {"matchLabels": {"a": "b"}}
    validate(deployment)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readOnlyRootFilesytem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    del container["readOnlyRootFilesytem"]
    container["ports"][0]["containerPort"] = "18700"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    monitor = yaml.safe_load((KUBE / "sidecar" / "podmonitor.yaml").read_text())
    validate(monitor)
    monitor["spec"]["podMetricsEndpoints"][0]["scrapeInterval"] = "30s"
    with pytest.raises(AssertionError, match="scrapeInterval"):
        validate(monitor)
    monitor["spec"]["podMetricsEndpoints"][0] = {"port": 18700}
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)


# -- the containers ----------------------------------------------------------------------------


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def preemptscope_containers(folder: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    found = []
    for deployment in objects("Deployment", folder):
        spec = pod_spec(deployment)
        for container in spec.get("initContainers", []) + spec["containers"]:
            if container["image"].split(":")[0].endswith("preemptscope"):
                found.append((spec, container))
    return found


@needs_kubectl
@pytest.mark.parametrize("folder", [SIDECAR, FLEET], ids=["sidecar", "central"])
def test_preemptscope_runs_unprivileged_with_limits_and_a_secret_token(folder: Path) -> None:
    containers = preemptscope_containers(folder)
    assert containers
    for spec, container in containers:
        context = {**spec.get("securityContext", {}), **container["securityContext"]}
        assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["seccompProfile"]["type"] == "RuntimeDefault"
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"]
        assert resources["limits"]["memory"]
        # Every path it writes is a volume (the root filesystem is read-only).
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        args = container["args"]
        state = args[args.index("--state-dir") + 1]
        assert state in mounts and not mounts[state].get("readOnly")
        assert "/tmp" in mounts
        # The token comes from a Secret, as a file, never in the manifest.
        token = args[args.index("--token-file") + 1]
        mount = next(m for path, m in mounts.items() if token.startswith(path + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"] == "preemptscope-token"
        assert "--token" not in args
        assert not any(e["name"] == "PREEMPTSCOPE_TOKEN" for e in container.get("env", []))


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], arg) for arg in args]


def serve_settings(
    args: list[str], tmp_path: Path, env: dict[str, str] | None = None
) -> settings.ServeSettings:
    """The container's arguments through preemptscope's own `serve` parser and validation."""
    token = tmp_path / "token"
    token.write_text("a-token-of-32-characters-or-more\n")
    args = [str(token) if a == "/var/run/secrets/preemptscope/token" else a for a in args]
    namespace = build_parser().parse_args(args)
    return settings.resolve(namespace, environ=env or {})


@needs_kubectl
def test_the_sidecar_arguments_are_valid_serve_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = one("Deployment", SIDECAR, "vllm")
    sidecar = next(c for c in pod_spec(deployment)["initContainers"] if c["name"] == "preemptscope")
    env = {"POD_NAME": "vllm-7d9f-x2", "POD_NAMESPACE": "llm"}
    for variable in sidecar["env"]:
        assert variable["valueFrom"]["fieldRef"]["fieldPath"] in {
            "metadata.name",
            "metadata.namespace",
        }
    monkeypatch.setattr(os, "environ", {**os.environ, **env})
    config = serve_settings(expand(sidecar["args"], env), tmp_path, env)
    assert [t.path for t in config.logs] == ["/var/log/vllm/vllm.log"]
    assert [t.url for t in config.scrapes] == ["http://127.0.0.1:8000/metrics"]
    assert config.host == "0.0.0.0"
    port = next(p for p in sidecar["ports"] if p["name"] == "preemptscope")
    assert config.port == port["containerPort"]
    assert config.token == "a-token-of-32-characters-or-more"
    # The log and the local scrape join as one server, named namespace/pod.
    assert [t.deployment for t in config.logs] == ["llm/vllm-7d9f-x2"]
    assert [t.deployment for t in config.scrapes] == ["llm/vllm-7d9f-x2"]


@needs_kubectl
def test_the_central_arguments_are_valid_serve_settings(tmp_path: Path) -> None:
    deployment = one("Deployment", FLEET, "preemptscope")
    (container,) = pod_spec(deployment)["containers"]
    config_map = next(
        c for c in objects("ConfigMap", FLEET) if c["metadata"]["name"].startswith("preemptscope-c")
    )
    config = serve_settings(expand(container["args"], config_map["data"]), tmp_path)
    assert getattr(config, "prometheus", None)
    assert config.host == "0.0.0.0" and config.port == 18700


@needs_kubectl
def test_the_sidecar_is_native_and_does_not_gate_vllm_readiness() -> None:
    deployment = one("Deployment", SIDECAR, "vllm")
    spec = pod_spec(deployment)
    (sidecar,) = spec["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    # A sidecar's readiness counts towards the pod's; a startupProbe holds vLLM back.
    assert "readinessProbe" not in sidecar and "startupProbe" not in sidecar
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (vllm,) = spec["containers"]
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/health"
    # The same file: vLLM's logging config writes it, the sidecar follows it.
    log_arg = sidecar["args"][sidecar["args"].index("--log") + 1].split("=")[0]
    logs_volume = next(m for m in sidecar["volumeMounts"] if log_arg.startswith(m["mountPath"]))
    assert logs_volume["readOnly"] is True
    shared = next(m for m in vllm["volumeMounts"] if m["name"] == logs_volume["name"])
    config_path = next(e for e in vllm["env"] if e["name"] == "VLLM_LOGGING_CONFIG_PATH")["value"]
    config_mount = next(m for m in vllm["volumeMounts"] if config_path.startswith(m["mountPath"]))
    volume = next(v for v in spec["volumes"] if v["name"] == config_mount["name"])
    config_map = one("ConfigMap", SIDECAR, volume["configMap"]["name"])
    logging_config = json.loads(config_map["data"][Path(config_path).name])
    filename = logging_config["handlers"]["file"]["filename"]
    assert filename == log_arg and filename.startswith(shared["mountPath"] + "/")
    # The PodMonitor scrapes the sidecar's named port on the pods the patch labelled.
    monitor = one("PodMonitor", SIDECAR, "preemptscope-sidecar")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] in {p["name"] for p in sidecar["ports"]}
    assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": "preemptscope"}]


def test_vllms_logging_config_writes_lines_preemptscope_reads(tmp_path: Path) -> None:
    """vLLM's loggers through the shipped dictConfig (stdlib classes only, any vLLM version)."""
    config = json.loads((KUBE / "sidecar" / "vllm-logging.json").read_text())
    path = tmp_path / "vllm.log"
    config["handlers"]["file"]["filename"] = str(path)
    config["handlers"]["console"]["stream"] = "ext://sys.stderr"
    logging.config.dictConfig(config)
    logger = logging.getLogger("vllm.v1.metrics.loggers")
    try:
        logger.info(
            "Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: "
            "311.2 tokens/s, Running: 48 reqs, Waiting: 7 reqs, GPU KV cache usage: 99.1%, "
            "Prefix cache hit rate: 12.5%"
        )
        server = logging.getLogger("vllm.entrypoints.openai.api_server")
        server.info("vLLM API server version 0.11.0")
    finally:
        for handler in logging.getLogger("vllm").handlers:
            handler.close()
        logging.getLogger("vllm").handlers.clear()
    lines = path.read_text().splitlines()
    assert len(lines) == 2, lines
    frames = parse_lines(lines, source=str(path), deployment="llm/vllm-0")
    assert frames.accounting.unrecognized_lines == 0
    stats = frames["scheduler_stats"]
    assert stats.height == 1
    assert stats["running"][0] == 48 and stats["waiting"][0] == 7
    assert abs(stats["gpu_kv_cache_usage"][0] - 0.991) < 1e-9


# -- the generated monitoring manifests --------------------------------------------------------


def test_the_generated_manifests_are_up_to_date() -> None:
    run = subprocess.run(
        [sys.executable, str(KUBE / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_the_generator_notices_a_changed_source(tmp_path: Path) -> None:
    shutil.copy(KUBE / "monitoring" / "grafana-dashboard.yaml", tmp_path)
    stale = tmp_path / "prometheusrule.yaml"
    stale.write_text((KUBE / "monitoring" / "prometheusrule.yaml").read_text().replace("5m", "6m"))
    run = subprocess.run(
        [sys.executable, str(KUBE / "generate.py"), "--check", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "prometheusrule.yaml" in run.stderr


def test_the_prometheusrule_is_the_shipped_rules() -> None:
    rule = yaml.safe_load((KUBE / "monitoring" / "prometheusrule.yaml").read_text())
    rules = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "rules.yml").read_text())
    assert rule["spec"]["groups"] == rules["groups"]
    dashboard = yaml.safe_load((KUBE / "monitoring" / "grafana-dashboard.yaml").read_text())
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((ROOT / "dashboards" / "grafana" / "preemptscope.json").read_text())
    assert json.loads(dashboard["data"]["preemptscope.json"]) == shipped


@needs_kubectl
@needs_promtool
@pytest.mark.integration
def test_the_rendered_prometheusrule_passes_promtool(tmp_path: Path) -> None:
    """The rules as Kubernetes gets them: checked, and the shipped unit tests run on them."""
    rule = one("PrometheusRule", FLEET)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(ROOT / "dashboards" / "prometheus" / "rules_test.yml", tmp_path)
    for args in (["check", "rules", "rules.yml"], ["test", "rules", "rules_test.yml"]):
        run = subprocess.run(
            ["promtool", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stdout + run.stderr


def test_runbook_base_prefixes_every_link(tmp_path: Path) -> None:
    base = "https://git.example/preemptscope/blob/main/"
    run = subprocess.run(
        [sys.executable, str(KUBE / "generate.py"), "--runbook-base", base, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    rule = yaml.safe_load((tmp_path / "prometheusrule.yaml").read_text())
    urls = [
        r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert urls and all(u.startswith(base + "docs/runbooks.md#") for u in urls)


@needs_kubectl
def test_services_and_monitors_point_at_ports_that_exist() -> None:
    deployment = one("Deployment", FLEET, "preemptscope")
    (container,) = pod_spec(deployment)["containers"]
    ports = {p["name"] for p in container["ports"]}
    service = one("Service", FLEET, "preemptscope")
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    monitor = one("ServiceMonitor", FLEET)
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    policy = one("NetworkPolicy", FLEET)
    # Narrowed to preemptscope's pods: an empty podSelector would cut off every pod here.
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert {p["port"] for p in policy["spec"]["ingress"][0]["ports"]} <= ports


@needs_kubectl
@pytest.mark.parametrize(
    "folder", [KUBE / "examples" / "fleet", KUBE / "examples" / "vllm-sidecar"]
)
def test_every_monitor_and_rule_carries_the_stacks_selector_label(folder: Path) -> None:
    """kube-prometheus-stack selects PodMonitors, ServiceMonitors and PrometheusRules by
    `release: <Helm release>`: the examples set it (kustomize), so Prometheus scrapes them."""
    kinds = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
    found = [doc for doc in render(folder) if doc["kind"] in kinds]
    assert found
    for doc in found:
        labels = doc["metadata"].get("labels", {})
        assert labels.get("release") == "kube-prometheus-stack", doc["metadata"]["name"]


WRITER = """
import json, logging, logging.config, sys
config = json.load(open(sys.argv[1]))
config["handlers"]["file"]["filename"] = sys.argv[2]
config["handlers"]["console"]["stream"] = "ext://sys.stderr"
config["handlers"]["console"]["level"] = "ERROR"
logging.config.dictConfig(config)
log = logging.getLogger("vllm.v1.metrics.loggers")
for i in range(int(sys.argv[3])):
    log.info("Engine %03d: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0"
             " tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV cache usage: 50.0%%",
             int(sys.argv[4]), i)
"""


def test_two_vllm_processes_share_the_log_file_without_losing_lines(tmp_path: Path) -> None:
    """vLLM's API server and engine core both log: the file handler must take both whole."""
    path = tmp_path / "vllm.log"
    config = str(KUBE / "sidecar" / "vllm-logging.json")
    count = 2000
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, config, str(path), str(count), str(n)])
        for n in (0, 1)
    ]
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    lines = path.read_text().splitlines()
    assert len(lines) == 2 * count
    frames = parse_lines(lines, source=str(path), deployment="llm/vllm-0")
    assert frames.accounting.unrecognized_lines == 0
    stats = frames["scheduler_stats"]
    assert stats.height == 2 * count
    assert sorted(stats["engine"].value_counts()["count"].to_list()) == [count, count]
