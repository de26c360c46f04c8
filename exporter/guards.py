"""ASGI guards in front of the app: Host (DNS rebinding), Origin (CSRF) and HEAD.

The default service has no token and listens on loopback, so any web page the operator opens
could reach it: through a name rebound to 127.0.0.1 (the browser then sends that name as Host)
or with a cross-origin form POST (the browser sends Origin). Both are refused here, before
routing. Clients that are not browsers (curl, Prometheus) send an IP or a configured name as
Host and no Origin, and pass.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any

from starlette.responses import JSONResponse

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# GET routes that cost seconds of CPU: a cross-site page must not make a browser fetch them.
COSTLY_PREFIXES = ("/api/dashboard/report.html",)
COSTLY_SUFFIXES = ("/figures",)


def host_name(header: str) -> str:
    """'Example.COM:8080' -> 'example.com'; '[::1]:80' -> '[::1]'."""
    value = header.strip().lower()
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _error(status: int, code: str, message: str) -> JSONResponse:
    body = {"error": {"status": status, "code": code, "message": message, "detail": None}}
    return JSONResponse(body, status_code=status)


class HostOriginGuard:
    """Refuse a Host that is neither an IP address, localhost nor an allowed name (400), and a
    cross-origin state-changing or costly request (403)."""

    def __init__(self, app: Any, allowed_hosts: Collection[str]) -> None:
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.allowed = {"localhost", *(h.lower() for h in allowed_hosts)}

    def host_allowed(self, name: str) -> bool:
        return self.any_host or is_ip(name) or name in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        raw_host = headers.get("host")
        # No Host at all (HTTP/1.0) cannot come from a browser page.
        if raw_host is not None and not self.host_allowed(host_name(raw_host)):
            response = _error(
                400,
                "bad_host",
                f"Host {host_name(raw_host)!r} is not a name this service answers to"
                " (DNS rebinding guard); add it with --allowed-hosts",
            )
            await response(scope, receive, send)
            return
        problem = self._cross_origin(scope, headers, raw_host)
        if problem:
            await _error(403, "cross_origin", problem)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _cross_origin(scope: Scope, headers: dict[str, str], raw_host: str | None) -> str | None:
        path: str = scope["path"]
        costly = path.startswith(COSTLY_PREFIXES) or (
            path.startswith("/api/") and path.endswith(COSTLY_SUFFIXES)
        )
        if scope["method"] in SAFE_METHODS and not costly:
            return None
        origin = headers.get("origin")
        if origin is not None:
            # Origin is scheme://host[:port]; same origin means the same host:port as Host.
            authority = origin.split("://", 1)[-1].lower()
            if origin == "null" or raw_host is None or authority != raw_host.strip().lower():
                return (
                    f"cross-origin {scope['method']} {path} from {origin} refused;"
                    " call the API from a script or curl, not from another site's page"
                )
            return None
        # Browsers that omit Origin still say where a request comes from.
        if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return f"cross-site {scope['method']} {path} refused"
        return None


class HeadAsGet:
    """HEAD is answered wherever GET is: the GET route runs and its body is dropped (the
    headers, Content-Length included, stay those of the GET)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headless(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headless)
