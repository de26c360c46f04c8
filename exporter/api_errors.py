"""The API's one error shape, and the request guards that answer in it.

Owns `ApiError` (raised by handlers), `error_response` (every error, whatever raised it:
`{"error": {"status", "code", "message", "detail"}}`), the upload body limit and the bearer
token check. Never routes or analyses anything.
"""

from __future__ import annotations

import contextlib
import hmac
from base64 import b64decode
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

__all__ = [
    "STATUS_CODES",
    "UPLOAD_PATHS",
    "ApiError",
    "BodyLimit",
    "bearer_guard",
    "error_response",
]

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    500: "internal_error",
    503: "not_ready",
}
UPLOAD_PATHS = ("/api/report",)


class ApiError(Exception):
    """Raised by handlers; rendered in the one error shape."""

    def __init__(self, status: int, message: str, detail: Any = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail
        self.code = code or STATUS_CODES.get(status, "error")


def error_response(
    status: int,
    message: str,
    detail: Any = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {
        "error": {
            "status": status,
            "code": code or STATUS_CODES.get(status, "error"),
            "message": message,
            "detail": detail,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


class BodyLimit:
    """ASGI middleware: refuse request bodies over `limit` bytes with 413, before parsing.

    Checks Content-Length up front, and counts streamed (chunked) bodies as they arrive.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or scope["path"] not in UPLOAD_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def counting_receive() -> MutableMapping[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, counting_receive, send)
        except _TooLarge:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Any, receive: Any, send: Any) -> None:
        response = error_response(
            413,
            f"request body larger than the limit of {self.limit} bytes"
            " (raise it with --max-upload)",
            detail={"limit_bytes": self.limit},
        )
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def bearer_guard(token: str | None) -> Callable[[Request], None]:
    """A dependency that checks `Authorization: Bearer <token>` (or Basic with the token as
    password, so a browser can log in to the dashboard). No token configured: open."""

    def check(request: Request) -> None:
        if token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        given = ""
        if scheme.lower() == "bearer":
            given = value.strip()
        elif scheme.lower() == "basic":
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                given = b64decode(value.strip(), validate=True).decode().partition(":")[2]
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            raise ApiError(
                401,
                "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
            )

    return check
