"""Kubernetes names for deployments: from kubelet log paths and from the downward API.

A fleet's logs all end in `0.log` and its sidecars all scrape `127.0.0.1:8000`; named after
the file or host, every pod would be the same deployment. Names here are `namespace/pod`.
Owns only the naming; it never reads a file or calls the Kubernetes API (paths and the
environment in, a name or None out).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import PurePath

__all__ = ["downward_api_name", "name_from_log_path"]

# DNS-1123 names (namespaces, pods) have no "_"; kubelet joins the parts with it.
_DNS = r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"
# /var/log/pods/<namespace>_<pod>_<uid>/<container>/<N>.log[.<rotation>][.gz]
_POD_DIR = re.compile(rf"^(?P<ns>{_DNS})_(?P<pod>{_DNS})_(?P<uid>[0-9a-f][0-9a-f-]{{7,}})$")
_POD_FILE = re.compile(r"^\d+\.log(?:\.\d{8}-\d{6})?(?:\.gz)?$")
# /var/log/containers/<pod>_<namespace>_<container>-<container id>.log
_CONTAINER_FILE = re.compile(
    rf"^(?P<pod>{_DNS})_(?P<ns>{_DNS})_(?P<container>{_DNS})-(?P<id>[0-9a-f]{{64}})\.log$"
)


def name_from_log_path(path: str) -> str | None:
    """`namespace/pod` for a kubelet log path, else None."""
    parts = PurePath(path).parts
    if len(parts) >= 3 and _POD_FILE.match(parts[-1]):
        match = _POD_DIR.match(parts[-3])
        if match is not None:
            return f"{match['ns']}/{match['pod']}"
    if parts:
        match = _CONTAINER_FILE.match(parts[-1])
        if match is not None:
            return f"{match['ns']}/{match['pod']}"
    return None


def downward_api_name(environ: Mapping[str, str] | None = None) -> str | None:
    """`POD_NAMESPACE/POD_NAME` (or `POD_NAME`) as a sidecar's downward API sets them."""
    env = os.environ if environ is None else environ
    pod = env.get("POD_NAME", "").strip()
    if not pod:
        return None
    namespace = env.get("POD_NAMESPACE", "").strip()
    return f"{namespace}/{pod}" if namespace else pod
