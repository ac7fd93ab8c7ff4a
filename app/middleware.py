"""Request body size limit, enforced before and while the body is read.

A request whose ``Content-Length`` is over the limit is answered 413 without reading a byte of
its body; a streamed body without ``Content-Length`` is cut off (413) as soon as the bytes read
pass the limit. Both answers use the service's error format. Only multipart uploads get the
large limit; every other body (JSON) gets a small one.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import error_body


class RequestBodyTooLarge(HTTPException):
    """Raised from ``receive`` once the body passes the limit; rendered by the HTTP handler."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than the {limit}-byte limit")


DEFAULT_MAX_JSON_BODY_BYTES = 16 * 1024 * 1024


class BodySizeLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_body_size: int,
        max_json_body_size: int = DEFAULT_MAX_JSON_BODY_BYTES,
    ) -> None:
        self.app = app
        self.max_body_size = max_body_size
        self.max_json_body_size = min(max_json_body_size, max_body_size)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        multipart = headers.get("content-type", "").lower().startswith("multipart/form-data")
        limit = self.max_body_size if multipart else self.max_json_body_size
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            response = JSONResponse(
                error_body(
                    "PayloadTooLarge",
                    f"the request body ({declared} bytes) is larger than the {limit}-byte limit",
                ),
                status_code=413,
                headers={"Connection": "close"},
            )
            await response(scope, receive, send)
            return

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise RequestBodyTooLarge(limit)
            return message

        await self.app(scope, limited_receive, send)
