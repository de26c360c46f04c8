"""What `--log` and `--scrape` name: a path or URL, and the deployment it belongs to.

Owns the PATH=NAME / URL=NAME forms and the names a deployment may have (`namespace/pod`
included). It reads no file and opens no URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from preemptscope.errors import ConfigError
from preemptscope.ingest.k8s import downward_api_name, name_from_log_path


@dataclass(frozen=True)
class LogTarget:
    path: str
    deployment: str


@dataclass(frozen=True)
class ScrapeTarget:
    url: str
    deployment: str


_DEPLOYMENT = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_POD_DEPLOYMENT = re.compile(r"^[A-Za-z0-9_.:-]{1,128}/[A-Za-z0-9_.:-]{1,128}$")


def _split_target(item: str, flag: str) -> tuple[str, str | None]:
    # The last '=' splits: URLs may hold '=' in the query, deployment names never do.
    head, sep, tail = item.rpartition("=")
    # In "http://h/metrics?a=b" the "=" belongs to the query, not to a DEPLOYMENT.
    query = re.split(r"[?&]", head)[-1] if "?" in head else "="
    if sep and head and _DEPLOYMENT.match(tail) and "/" not in tail and "=" in query:
        return head, tail
    # namespace/pod, as Kubernetes names a server (unless the whole item is an existing path).
    if sep and head and _POD_DEPLOYMENT.match(tail) and "=" in query and not Path(item).exists():
        return head, tail
    if sep and not tail:
        raise ConfigError(f"{flag} {item}: empty deployment name after '='")
    return item, None


def parse_log_target(item: str) -> LogTarget:
    path, deployment = _split_target(item, "--log")
    if not path:
        raise ConfigError(f"--log {item!r}: empty path")
    # Unnamed: a kubelet log path names its pod, a sidecar its own pod (downward API).
    name = deployment or name_from_log_path(path) or downward_api_name()
    return LogTarget(path=path, deployment=name or Path(path).stem or path)


def parse_scrape_target(item: str) -> ScrapeTarget:
    url, deployment = _split_target(item, "--scrape")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"--scrape {item!r}: expected an http:// or https:// URL")
    if deployment is None:
        # A sidecar's local scrape joins its log under the pod's name (downward API).
        deployment = downward_api_name() or re.sub(r"^https?://", "", url).split("/", 1)[0]
    return ScrapeTarget(url=url, deployment=deployment)
