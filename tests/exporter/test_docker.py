"""The Dockerfile, .dockerignore and compose file, checked without Docker (none where this is
built): layers, pins, ports, labels, and the healthcheck command run for real against a
service on 127.0.0.1."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

from preemptscope import settings
from tests.exporter.conftest import running_service, wait_for

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for these patterns: the last matching pattern wins."""
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        bare = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(
            fnmatch.fnmatch(p, bare) or fnmatch.fnmatch(p, bare.removeprefix("**/"))
            for p in prefixes
        ) or any(fnmatch.fnmatch(part, bare.removeprefix("**/")) for part in parts)
        if hit:
            verdict = not negate
    return verdict


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


def test_build_context_excludes_venv_git_and_caches_but_not_what_is_copied() -> None:
    patterns = dockerignore()
    dropped = [".git", ".venv", ".venv/lib/x.py", "ingest/__pycache__/a.pyc", "tests/x.py"]
    dropped += ["preemptscope.egg-info", "ingest/_scan.cpython-311-x86_64-linux-gnu.so"]
    for path in dropped:
        assert ignored(path, patterns), path
    copied = [
        src
        for word, args in instructions()
        if word == "COPY"
        for src in args.split()[:-1]
        if not src.startswith("--")
    ]
    assert copied, "no COPY found"
    for src in copied:
        assert (ROOT / src).exists(), src
        assert not ignored(src, patterns), f"{src} is copied but .dockerignore drops it"
        for file in (ROOT / src).rglob("*.py") if (ROOT / src).is_dir() else []:
            rel = file.relative_to(ROOT).as_posix()
            if "__pycache__" not in rel:
                assert not ignored(rel, patterns), rel


def test_dependencies_are_a_layer_of_their_own_and_pinned() -> None:
    steps = instructions()
    copies = [i for i, (w, a) in enumerate(steps) if w == "COPY"]
    first_code = next(i for i in copies if steps[i][1].startswith("preemptscope "))
    installs = [i for i, (w, a) in enumerate(steps) if w == "RUN" and "pip install" in a]
    deps = installs[0]
    assert deps < first_code, "dependencies must be installed before the code is copied"
    assert "-c constraints.txt" in steps[deps][1]
    assert steps[copies[0]][1].split() == ["pyproject.toml", "constraints.txt", "./"]
    code = installs[1]
    assert code > first_code and "--no-deps" in steps[code][1]
    # Every runtime dependency (and the build backend) has an exact pin.
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dependency in [*project["dependencies"], "setuptools>=77"]:
        requirement = Requirement(dependency)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pins, f"{name} missing from constraints.txt (scripts/constraints)"
        assert requirement.specifier.contains(pins[name]), (name, pins[name])


def test_base_image_is_an_exact_release_and_labels_are_set() -> None:
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.M)
    assert base, "the base image is an ARG with a default"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base.group(1))
    assert "FROM ${PYTHON_IMAGE}" in DOCKERFILE
    labels = " ".join(a for w, a in instructions() if w == "LABEL")
    for key in ("title", "description", "licenses", "version", "revision", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels


def _env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, args in instructions():
        if word == "ENV":
            env.update(dict(re.findall(r"(\w+)=(\S+)", args)))
    return env


def test_image_serves_on_all_interfaces_at_the_default_port() -> None:
    env = _env()
    assert env["PREEMPTSCOPE_HOST"] == "0.0.0.0"
    assert env["PREEMPTSCOPE_PORT"] == str(settings.DEFAULT_PORT)
    assert ("EXPOSE", str(settings.DEFAULT_PORT)) in instructions()
    assert ("ENTRYPOINT", '["preemptscope"]') in instructions()
    command = [a for w, a in instructions() if w == "CMD"]
    assert command == ['["serve"]'], "CMD runs the service (configured by the environment)"
    # Every variable the image sets is a real setting (a typo would be ignored silently).
    names = {s.env for s in settings.SETTINGS}
    for key in env:
        if key.startswith("PREEMPTSCOPE_"):
            assert key in names, key
    # The image's settings resolve (with the loopback host: tests bind nothing else).
    resolved = settings.resolve(None, environ={**env, "PREEMPTSCOPE_HOST": "127.0.0.1"})
    assert resolved.port == settings.DEFAULT_PORT
    assert resolved.logs[0].path == "/logs/vllm.log"


def _healthcheck_code() -> str:
    check = next(a for w, a in instructions() if w == "HEALTHCHECK")
    exec_form = json.loads(check[check.index("CMD") + 3 :].strip())
    assert exec_form[:2] == ["python", "-c"]
    code = str(exec_form[2])
    assert str(settings.DEFAULT_PORT) not in code.replace("'18700')", "')")  # only a fallback
    return code


def test_healthcheck_probes_the_configured_port(tmp_path: Path) -> None:
    code = _healthcheck_code()
    log = tmp_path / "vllm.log"
    log.write_text("")
    with running_service(tmp_path / "state", "--log", str(log)) as live:
        port = live.url.rsplit(":", 1)[1]
        wait_for(lambda: live.client().get("/healthz").status_code == 200)
        ok = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PREEMPTSCOPE_PORT": port},
            capture_output=True,
            timeout=30,
        )
        assert ok.returncode == 0, ok.stderr
    down = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PREEMPTSCOPE_PORT": port},
        capture_output=True,
        timeout=30,
    )
    assert down.returncode != 0


def test_compose_uses_the_default_port_and_names_only_tests_that_exist() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    service = compose["services"]["preemptscope"]
    assert service["ports"] == [f"127.0.0.1:{settings.DEFAULT_PORT}:{settings.DEFAULT_PORT}"]
    assert "preemptscope" in service["environment"]["PREEMPTSCOPE_ALLOWED_HOSTS"].split(",")
    # vLLM's port is the demo vLLM's inside the stack, never one published on the host.
    published = [port for s in compose["services"].values() for port in s.get("ports", [])]
    assert published and not any(":8000" in port for port in published)
    named = re.findall(r"(tests/[\w/]+\.py)(?:\s*\((\w+)\))?", text)
    assert named
    for path, function in named:
        assert (ROOT / path).exists(), f"docker-compose.yml names {path}, which does not exist"
        if function:
            assert f"def {function}(" in (ROOT / path).read_text(), function
