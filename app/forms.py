"""Helpers for multipart endpoints: JSON-valued form fields and uploaded files."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import UploadFile
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from app.archives import IncomingFile

T = TypeVar("T")


def parse_json_field(raw: str | None, annotation: Any, field: str) -> Any:
    """Validate a form field that carries JSON (``tags='{"k": "v"}'``); 422 when it is not valid."""
    if raw is None or raw.strip() == "":
        return None
    try:
        return TypeAdapter(annotation).validate_json(raw)
    except ValidationError as error:
        raise RequestValidationError(
            [
                {
                    "type": item["type"],
                    "loc": ("body", field, *item["loc"]),
                    "msg": item["msg"],
                    "input": raw,
                }
                for item in error.errors()
            ]
        ) from None


def incoming(upload: UploadFile | None) -> IncomingFile | None:
    """The service-side view of an optional uploaded file (an empty part counts as absent)."""
    if upload is None or (not upload.filename and (upload.size or 0) == 0):
        return None
    return IncomingFile(filename=upload.filename, stream=upload.file)
