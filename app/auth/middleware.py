"""Refuse calls without a credential before their body is read.

FastAPI reads and parses a request body (JSON, or a multipart upload spooled to disk) before it
runs the dependencies that check the API key. Without this middleware an anonymous client could
make the server read a 2 GiB upload, or learn that its JSON is malformed (422), before being
told it has no key. Here a ``/v1`` call (and ``/metrics`` unless it is public) with no
``Authorization: Bearer`` / ``X-API-Key`` header, or with one that is not shaped like a key, is
answered 401 at once, in the same format as ``app.auth.dependencies``. Whether a well-formed
key exists, is revoked or has the role is still decided by those dependencies.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth.service import looks_like_key
from app.errors import error_body
from app.settings import Settings


def _presented_secret(headers: Headers) -> str | None:
    authorization = headers.get("authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get("x-api-key") or None


class CredentialsRequiredMiddleware:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    def _protected(self, path: str) -> bool:
        if path.startswith("/v1/") or path == "/v1":
            return True
        return path == "/metrics" and not getattr(self.settings, "metrics_public", False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self.settings.auth_required
            or not self._protected(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        secret = _presented_secret(Headers(scope=scope))
        if secret is None:
            code, detail = (
                "Unauthorized",
                "an API key is required (Authorization: Bearer or X-API-Key)",
            )
        elif not looks_like_key(secret):
            code, detail = "InvalidApiKey", "invalid API key"
        else:
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            error_body(code, detail),
            status_code=401,
            headers={"WWW-Authenticate": "Bearer", "Connection": "close"},
        )
        await response(scope, receive, send)
