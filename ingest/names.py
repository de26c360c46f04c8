"""Deployment names: the PATH=NAME form and the name a file gives when none is said.

Owns `split_spec` and `stem` (a file's name without rotation and compression suffixes, or
its kubelet `namespace/pod`). It reads no file.
"""

from __future__ import annotations

import re
from pathlib import Path

from preemptscope.ingest.k8s import name_from_log_path

NAME_FORM = re.compile(r"^[\w.@:-]+$")
# Kubernetes names: namespace/pod (the fleet and kubelet log paths name deployments so).
_POD_NAME = re.compile(r"^[\w.@:-]+/[\w.@:-]+$")


def split_spec(spec: str) -> tuple[str, str | None]:
    """ "PATH=NAME" -> (PATH, NAME); a path or URL that itself contains "=" stays whole."""
    if "=" in spec and not Path(spec).exists():
        path, _, name = spec.rpartition("=")
        query = re.split(r"[?&]", path)[-1] if "?" in path else "="
        # In "http://h/metrics?x=1" the "=" belongs to the query, not to a NAME.
        if path and NAME_FORM.match(name) and "/" not in name and "=" in query:
            return path, name
        if path and _POD_NAME.match(name) and Path(path).exists():
            return path, name
    return spec, None


def stem(path: str) -> str:
    """A deployment name from a path or URL: `namespace/pod` for a kubelet log path, else the
    file name without .gz/.log/.json/... suffixes (the host for a URL)."""
    if path == "-":
        return "stdin"
    pod = name_from_log_path(path)
    if pod is not None:  # a kubelet log path: namespace/pod, not "0"
        return pod
    if "://" in path:
        host = path.split("://", 1)[1].split("/", 1)[0]
        return host.replace(":", "_") or "metrics"
    name = Path(path.rstrip("/")).name or "deployment"
    for _ in range(3):
        head, dot, suffix = name.rpartition(".")
        known = ("gz", "log", "txt", "json", "jsonl", "csv", "prom")
        if dot and head and (suffix.lower() in known or suffix.isdigit()):  # vllm.log.1: rotated
            name = head
    return name
