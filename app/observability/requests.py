"""Per-request observability: the ``X-Request-ID`` header, HTTP metrics and an access log line.

A pure ASGI middleware (it must not buffer server-sent event streams): it takes the caller's
``X-Request-ID`` when it is a sane token (else makes one), exposes it to log records through a
context variable, echoes it on the response, and when the response ends records the request's
latency under its route template and logs one ``app.access`` line.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs import request_id_var
from app.observability.metrics import HttpMetrics

access_logger = logging.getLogger("app.access")

REQUEST_ID_HEADER = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
UNMATCHED_ROUTE = "<unmatched>"


def incoming_request_id(scope: Scope) -> str:
    """The caller's request id when it is a sane token, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER.encode():
            candidate = value.decode("latin-1").strip()
            if _VALID_REQUEST_ID.fullmatch(candidate):
                return candidate
            break
    return uuid.uuid4().hex


def route_template(scope: Scope) -> str:
    """``/v1/jobs/{job_id}`` for a matched route; one fixed label for everything else."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else UNMATCHED_ROUTE


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = incoming_request_id(scope)
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"
                ]
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = route_template(scope)
            method = str(scope.get("method", ""))
            self.metrics.observe(method, route, status, elapsed)
            access_logger.info(
                "%s %s %d %.1fms",
                method,
                scope.get("path", ""),
                status,
                elapsed * 1000,
                extra={
                    "method": method,
                    "path": scope.get("path", ""),
                    "route": route,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
            request_id_var.reset(token)
