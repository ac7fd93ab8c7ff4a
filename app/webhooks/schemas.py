"""Request and response bodies of ``/v1/webhooks``."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.db import DeliveryStatus

EventName = Literal[
    "*",
    "job.completed",
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "campaign.completed",
    "adapter.promoted",
]
EVENT_NAMES: tuple[str, ...] = EventName.__args__  # type: ignore[attr-defined]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2048, description="http(s) URL that receives POSTed JSON events")
    events: list[EventName] = Field(
        min_length=1,
        description="job.completed (any end), job.succeeded, job.failed, job.cancelled, "
        "campaign.completed, adapter.promoted, or * for all",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("url must be an absolute http:// or https:// URL")
        return value

    @field_validator("events")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class WebhookOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    url: str
    events: list[str]
    active: bool
    created_at: dt.datetime


class WebhookCreated(WebhookOut):
    secret: str = Field(
        description="HMAC-SHA256 key of X-Recycle-Signature; shown once, store it now"
    )


class DeliveryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    webhook_id: int
    event: str
    payload: dict[str, Any]
    status: DeliveryStatus
    attempts: int
    next_attempt_at: dt.datetime | None
    last_error: str | None
    response_status: int | None
    created_at: dt.datetime
    delivered_at: dt.datetime | None
