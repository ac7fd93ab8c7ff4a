"""Webhooks and their signed, retried deliveries."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, DeliveryStatus, JSONType, enum_column, utcnow


class Webhook(Base):
    """A URL told about events (``campaign.finished``, ``job.succeeded``…)."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    url: Mapped[str] = mapped_column(sa.String(2048))
    events: Mapped[list[str]] = mapped_column(JSONType, default=list)
    secret: Mapped[str | None] = mapped_column(sa.String(255))
    """HMAC key of this webhook's signatures; none: the service's ``webhook_secret``."""
    active: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class WebhookDelivery(Base):
    """One event sent (or to be sent) to one webhook."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        sa.Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    webhook_id: Mapped[int] = mapped_column(
        sa.ForeignKey("webhooks.id", ondelete="CASCADE"), index=True
    )
    event: Mapped[str] = mapped_column(sa.String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    status: Mapped[DeliveryStatus] = mapped_column(
        enum_column(DeliveryStatus, "delivery_status"), default=DeliveryStatus.PENDING
    )
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[dt.datetime | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    response_status: Mapped[int | None]
    signature: Mapped[str | None] = mapped_column(sa.String(128))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[dt.datetime | None]
