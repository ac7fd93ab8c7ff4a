"""The OpenAPI document says what errors really look like.

FastAPI documents 422 as ``{"detail": [...]}`` (``HTTPValidationError``), but every error of this
service is rendered by ``app.errors`` as ``{"error": "<Code>", "detail": "...", ...}``. This
module rewrites the 422 responses to :class:`ValidationErrorOut` and gives every ``/v1``
operation a ``default`` response with :class:`ErrorOut`, so clients (and schemathesis) can rely
on the document for error bodies too.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

REF = "#/components/schemas/{model}"


class ErrorOut(BaseModel):
    """Every error response: a stable code and a readable detail (some codes add fields)."""

    model_config = ConfigDict(extra="allow")

    error: str = Field(description="stable error code, e.g. ModelNotFound, DatabaseUnavailable")
    detail: str


class FieldError(BaseModel):
    loc: list[str]
    msg: str
    type: str


class ValidationErrorOut(ErrorOut):
    """422: the request did not match the schema; ``fields`` lists every problem."""

    fields: list[FieldError]


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Patch a generated OpenAPI document in place (and return it)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (ErrorOut, ValidationErrorOut):
        definition = model.model_json_schema(ref_template=REF)
        components.update(definition.pop("$defs", {}))
        components[model.__name__] = definition
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            if "422" in responses:
                responses["422"]["content"] = _json(ValidationErrorOut)
            if path.startswith("/v1/"):
                responses.setdefault(
                    "default", {"description": "an error", "content": _json(ErrorOut)}
                )
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def install_error_documentation(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the patched document (built once, then cached)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
