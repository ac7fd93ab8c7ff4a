"""Errors that carry their HTTP status, and the one set of handlers that renders them.

Every error response has the body ``{"error": "<Code>", "detail": "..."}`` (422 adds
``fields``, the per-field validation errors).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from recycling_core.errors import RecyclingError

logger = logging.getLogger(__name__)


class AppError(Exception):
    """An error the API reports to its caller: status, stable code and a readable detail."""

    status_code: int = 500
    code: str = "InternalError"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.headers = headers
        self.extra = extra or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


class BadRequest(AppError):
    status_code = 400
    code = "BadRequest"


class Unauthorized(AppError):
    status_code = 401
    code = "Unauthorized"

    def __init__(self, detail: str, **kwargs: Any) -> None:
        kwargs.setdefault("headers", {"WWW-Authenticate": "Bearer"})
        super().__init__(detail, **kwargs)


class Forbidden(AppError):
    status_code = 403
    code = "Forbidden"


class NotFound(AppError):
    status_code = 404
    code = "NotFound"


class Conflict(AppError):
    status_code = 409
    code = "Conflict"


class PayloadTooLarge(AppError):
    status_code = 413
    code = "PayloadTooLarge"


class ServiceUnavailable(AppError):
    status_code = 503
    code = "ServiceUnavailable"


class UnsafeArchive(BadRequest):
    """An uploaded archive that would write outside its directory, or unpack to too much."""

    code = "UnsafeArchive"


class ArtifactCorrupted(AppError):
    """A stored file whose sha256 no longer matches the manifest recorded at registration."""

    status_code = 500
    code = "ArtifactCorrupted"


class ArtifactStoreUnavailable(OSError):
    """The artifact store failed while writing (disk full, network): 503, nothing was kept.

    An OSError, so the job engine keeps treating it as transient (retried with backoff).
    """

    code = "ArtifactStoreUnavailable"


def error_body(code: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"error": code, "detail": detail, **extra}


def _response(
    status: int, code: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(error_body(code, detail, **extra), status_code=status, headers=headers)


async def app_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    if exc.status_code >= 500:
        logger.error("%s", exc)
    return _response(exc.status_code, exc.code, exc.detail, headers=exc.headers, **exc.extra)


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    fields = []
    for error in exc.errors():
        fields.append(
            {
                "loc": [str(part) for part in error.get("loc", ())],
                "msg": error.get("msg", ""),
                "type": error.get("type", ""),
            }
        )
    return fields


async def validation_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    fields = _field_errors(exc)
    summary = (
        "; ".join(f"{'.'.join(field['loc'])}: {field['msg']}" for field in fields)
        or "invalid request"
    )
    return _response(422, "ValidationError", summary, fields=jsonable_encoder(fields))


async def recycling_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RecyclingError)
    extra: dict[str, Any] = {"field": exc.field} if exc.field else {}
    return _response(400, exc.code, exc.message, **extra)


async def database_unavailable_handler(_request: Request, exc: Exception) -> JSONResponse:
    logger.error("database unavailable: %s", exc)
    return _response(
        503, "DatabaseUnavailable", "the registry database is unavailable; retry later"
    )


async def dbapi_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, sa_exc.DBAPIError)
    if exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError):
        return await database_unavailable_handler(request, exc)
    if isinstance(exc, sa_exc.DataError):
        # A value the schema let through but the database cannot hold (a NUL byte in a name,
        # a number out of the column's range): the caller's input, not a server fault.
        reason = str(exc.orig).splitlines()[0] if exc.orig is not None else "invalid value"
        logger.warning("value refused by the database: %s", reason)
        return _response(400, "InvalidValue", f"a value cannot be stored: {reason}")
    return await internal_error_handler(request, exc)


async def http_exception_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    try:
        code = HTTPStatus(exc.status_code).phrase.title().replace(" ", "").replace("-", "")
    except ValueError:
        code = "HTTPError"
    code = {"RequestEntityTooLarge": "PayloadTooLarge", "ContentTooLarge": "PayloadTooLarge"}.get(
        code, code
    )
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return _response(exc.status_code, code, detail, headers=getattr(exc, "headers", None))


async def artifact_store_unavailable_handler(_request: Request, exc: Exception) -> JSONResponse:
    logger.error("artifact store unavailable: %s", exc)
    return _response(503, ArtifactStoreUnavailable.code, f"the artifact store failed: {exc}")


async def internal_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=exc)
    return _response(500, "InternalError", "an internal error occurred")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers; the most specific class wins (Starlette walks the MRO)."""
    app.add_exception_handler(AppError, app_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(RecyclingError, recycling_error_handler)
    app.add_exception_handler(sa_exc.OperationalError, database_unavailable_handler)
    app.add_exception_handler(sa_exc.DBAPIError, dbapi_error_handler)
    app.add_exception_handler(sa_exc.TimeoutError, database_unavailable_handler)
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)
    app.add_exception_handler(ArtifactStoreUnavailable, artifact_store_unavailable_handler)
    app.add_exception_handler(Exception, internal_error_handler)
