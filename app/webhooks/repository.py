"""SQL of webhooks and their deliveries."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import DeliveryStatus, Webhook, WebhookDelivery
from app.pagination import Pagination


class WebhookRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, webhook: Webhook) -> Webhook:
        self.session.add(webhook)
        self.session.flush()
        return webhook

    def get(self, webhook_id: int) -> Webhook | None:
        return self.session.get(Webhook, webhook_id)

    def delete(self, webhook: Webhook) -> None:
        self.session.delete(webhook)
        self.session.flush()

    def page(self, page: Pagination) -> tuple[list[Webhook], int]:
        query = sa.select(Webhook).where(Webhook.active.is_(True))
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(Webhook.id).limit(page.limit).offset(page.offset)
        ).all()
        return list(rows), total

    def active(self) -> list[Webhook]:
        return list(self.session.scalars(sa.select(Webhook).where(Webhook.active.is_(True))).all())

    def add_delivery(self, delivery: WebhookDelivery) -> WebhookDelivery:
        self.session.add(delivery)
        self.session.flush()
        return delivery

    def get_delivery(self, delivery_id: int) -> WebhookDelivery | None:
        return self.session.get(WebhookDelivery, delivery_id, populate_existing=True)

    def deliveries(self, webhook_id: int, page: Pagination) -> tuple[list[WebhookDelivery], int]:
        query = sa.select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(WebhookDelivery.id.desc()).limit(page.limit).offset(page.offset)
        ).all()
        return list(rows), total

    def update_delivery(
        self, delivery_id: int, expected: DeliveryStatus, values: dict[str, Any]
    ) -> bool:
        """Compare-and-set on the delivery's status (two workers never both record it)."""
        result = self.session.execute(
            sa.update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status == expected)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def overdue(self, due_before: dt.datetime, limit: int = 100) -> list[int]:
        """PENDING deliveries whose next attempt is long overdue (their message was lost)."""
        return list(
            self.session.scalars(
                sa.select(WebhookDelivery.id)
                .where(
                    WebhookDelivery.status == DeliveryStatus.PENDING,
                    sa.func.coalesce(WebhookDelivery.next_attempt_at, WebhookDelivery.created_at)
                    < due_before,
                )
                .order_by(WebhookDelivery.id)
                .limit(limit)
            ).all()
        )
