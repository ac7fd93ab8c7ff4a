"""Structured logs: one JSON object per line, carrying the request id and the job id.

The ids live in context variables: :class:`~app.observability.requests.ObservabilityMiddleware`
sets ``request_id`` for each HTTP request (from ``X-Request-ID`` or a new one) and the worker
task sets ``job_id`` while it runs a job (:func:`job_context`). :class:`ContextFilter` copies
them onto every record, so any logger (ours, uvicorn's, Celery's) carries them.

``recycle serve`` and the worker call :func:`configure_logging` with ``RECYCLE_LOG_FORMAT``
(``json`` by default, ``text`` for people) and ``RECYCLE_LOG_LEVEL``.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_id", default=None
)
job_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("job_id", default=None)

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is kept.
_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()) | {
    "message",
    "asctime",
    "request_id",
    "job_id",
    "color_message",
    "taskName",
}


@contextlib.contextmanager
def job_context(job_id: str) -> Iterator[None]:
    """Log records made inside carry ``job_id`` (a worker running one job)."""
    token = job_id_var.set(job_id)
    try:
        yield
    finally:
        job_id_var.reset(token)


class ContextFilter(logging.Filter):
    """Puts the current request id and job id on each record (``None`` outside them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id_var.get()
        if getattr(record, "job_id", None) is None:
            record.job_id = job_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", "request_id", "job_id", ...extra, "exception"}``."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "job_id"):
            value = getattr(record, key, None)
            if value is not None:
                document[key] = value
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Readable lines for a terminal, with the ids when there are any."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s%(ids)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = [
            f"{key}={value}"
            for key in ("request_id", "job_id")
            if (value := getattr(record, key, None)) is not None
        ]
        record.ids = f" [{' '.join(ids)}]" if ids else ""
        return super().format(record)


# Loggers that install handlers of their own; theirs go, and they propagate to the root.
_OWN_HANDLER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task")


def configure_logging(fmt: str = "json", level: str | int = "INFO") -> None:
    """One stderr handler on the root logger with the chosen format and the context filter."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else str(level).upper())
    for name in _OWN_HANDLER_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
