"""The service's own log: an access log that never writes a secret, and JSON lines for
collectors.

uvicorn's access log writes the raw query string, so a `?token=` sign-in link would put the
bearer token in every log collector. It is off; this middleware logs instead (with
`--access-log`), with secret-looking query values replaced.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

LOG = logging.getLogger("preemptscope.access")
SECRET_KEYS = frozenset({"token", "access_token", "api_key", "apikey", "key", "password", "auth"})
REDACTED = "REDACTED"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def redact_query(query: str, secrets: tuple[str, ...] = ()) -> str:
    """The query string with secret-looking values (and any known secret) replaced."""
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    clean = [
        (k, REDACTED if k.lower() in SECRET_KEYS or (v and v in secrets) else v) for k, v in pairs
    ]
    return urlencode(clean, safe="[]:/,")


class AccessLog:
    """Log one line per request: client, method, path (redacted query), status, bytes, ms."""

    def __init__(self, app: Any, secrets: tuple[str, ...] = ()) -> None:
        self.app = app
        self.secrets = tuple(s for s in secrets if s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        size = 0

        async def counting(message: MutableMapping[str, Any]) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            query = redact_query(scope.get("query_string", b"").decode("latin-1"), self.secrets)
            path = scope["path"] + (f"?{query}" if query else "")
            client = scope.get("client")
            address = f"{client[0]}:{client[1]}" if client else "-"
            millis = round((time.perf_counter() - started) * 1000, 1)
            LOG.info(
                '%s "%s %s" %d %d %.1fms',
                address,
                scope["method"],
                path,
                status,
                size,
                millis,
                extra={
                    "client": address,
                    "method": scope["method"],
                    "path": path,
                    "status": status,
                    "bytes": size,
                    "duration_ms": millis,
                },
            )


ACCESS_FIELDS = ("client", "method", "path", "status", "bytes", "duration_ms")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (+ access fields, exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ACCESS_FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, fmt: str) -> None:
    """The root handler on stderr for preemptscope and uvicorn alike (text or JSON)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own loggers propagate to the root handler (log_config=None keeps them bare).
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    # httpx logs every outgoing request at info: a line per scrape of each vLLM target. A
    # scrape is logged by preemptscope when it fails (warning); each one only at debug.
    quiet = max(logging.WARNING, root.level)
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.DEBUG if root.level <= logging.DEBUG else quiet)
