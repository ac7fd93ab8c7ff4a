"""Webhooks: subscriptions, delivery rows created with the events, signed POSTs with retries.

An event (a job ended, a campaign ended, an adapter was promoted) creates one
``WebhookDelivery`` row per subscribed webhook in the transaction that recorded it; the
``recycle.deliver_webhook`` message is sent after that transaction commits. A delivery POSTs

    {"id": <delivery id>, "event": "...", "created_at": "...", "timestamp": <unix>, "data": {...}}

with ``X-Recycle-Signature: sha256=<hex HMAC-SHA256 of the exact body with the webhook's
secret>``, ``X-Recycle-Timestamp`` (also inside the signed body, so a replay is detectable),
``X-Recycle-Event`` and ``X-Recycle-Delivery``. Anything but a 2xx is retried with exponential
backoff until ``webhook_max_attempts``; then the delivery is FAILED with its last error.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import secrets
import time
from typing import Any

import httpx
from sqlalchemy.orm import Session

from app.campaigns.service import AdapterPromoted, CampaignFinished
from app.db import DeliveryStatus, JobStatus, Webhook, WebhookDelivery, utcnow
from app.db.session import SessionFactory, transaction
from app.errors import NotFound
from app.events import subscribe
from app.jobs.service import JobFinished
from app.pagination import Paged, Pagination
from app.queue import backoff_delay, enqueue_webhook_delivery
from app.settings import Settings
from app.webhooks.repository import WebhookRepository

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Recycle-Signature"
TIMESTAMP_HEADER = "X-Recycle-Timestamp"
EVENT_HEADER = "X-Recycle-Event"
DELIVERY_HEADER = "X-Recycle-Delivery"
SECRET_BYTES = 32


def create_webhook(session: Session, url: str, events: list[str]) -> tuple[Webhook, str]:
    """Register a webhook; its secret is returned once (only HMAC needs it afterwards)."""
    secret = f"whsec_{secrets.token_urlsafe(SECRET_BYTES)}"
    now = utcnow()
    webhook = Webhook(
        url=url, events=list(events), secret=secret, active=True, created_at=now, updated_at=now
    )
    WebhookRepository(session).add(webhook)
    return webhook, secret


def get_webhook(session: Session, webhook_id: int) -> Webhook:
    webhook = WebhookRepository(session).get(webhook_id)
    if webhook is None or not webhook.active:
        raise NotFound(f"webhook {webhook_id} does not exist", code="WebhookNotFound")
    return webhook


def list_webhooks(session: Session, page: Pagination) -> Paged[Webhook]:
    rows, total = WebhookRepository(session).page(page)
    return Paged(rows, total, page)


def delete_webhook(session: Session, webhook_id: int) -> None:
    """Remove a webhook and its deliveries; queued deliveries then do nothing."""
    webhook = get_webhook(session, webhook_id)
    WebhookRepository(session).delete(webhook)


def list_deliveries(session: Session, webhook_id: int, page: Pagination) -> Paged[WebhookDelivery]:
    """A webhook's deliveries, newest first, with attempts and the last error."""
    get_webhook(session, webhook_id)
    rows, total = WebhookRepository(session).deliveries(webhook_id, page)
    return Paged(rows, total, page)


# --------------------------------------------------------------------------- events


def _subscribed(webhook: Webhook, event: str) -> bool:
    events = set(webhook.events or [])
    return "*" in events or event in events


def emit(
    session: Session, event: str, data: dict[str, Any], *, aliases: tuple[str, ...] = ()
) -> list[WebhookDelivery]:
    """Create a delivery for every webhook subscribed to ``event`` (or one of ``aliases``)."""
    repository = WebhookRepository(session)
    deliveries = []
    now = utcnow()
    for webhook in repository.active():
        if not any(_subscribed(webhook, name) for name in (event, *aliases)):
            continue
        delivery = repository.add_delivery(
            WebhookDelivery(
                webhook_id=webhook.id,
                event=event,
                payload=data,
                status=DeliveryStatus.PENDING,
                attempts=0,
                next_attempt_at=now,
                created_at=now,
            )
        )
        enqueue_webhook_delivery(session, delivery.id)
        deliveries.append(delivery)
    return deliveries


_JOB_EVENTS = {
    JobStatus.SUCCEEDED: "job.succeeded",
    JobStatus.FAILED: "job.failed",
    JobStatus.CANCELLED: "job.cancelled",
}


def on_job_finished(session: Session, event: JobFinished) -> None:
    data = {
        "job_id": event.job_id,
        "kind": event.kind.value,
        "status": event.status.value,
        "campaign_id": event.campaign_id,
        "result_adapter_id": event.result_adapter_id,
        "result_report_id": event.result_report_id,
        "error_code": event.error_code,
        "error_message": event.error_message,
    }
    # One delivery per webhook: "job.completed" for any end, the specific name as an alias.
    emit(session, "job.completed", data, aliases=(_JOB_EVENTS[event.status],))


def on_campaign_finished(session: Session, event: CampaignFinished) -> None:
    emit(
        session,
        "campaign.completed",
        {"campaign_id": event.campaign_id, "status": event.status.value, "summary": event.summary},
    )


def on_adapter_promoted(session: Session, event: AdapterPromoted) -> None:
    emit(
        session,
        "adapter.promoted",
        {
            "campaign_id": event.campaign_id,
            "adapter_id": event.adapter_id,
            "recycled_from": event.source_adapter_id,
            "method": event.method,
            "model_version_id": event.model_version_id,
            "task_id": event.task_id,
            "alias": "production",
        },
    )


def install() -> None:
    """Subscribe webhook deliveries to job, campaign and promotion events (idempotent)."""
    subscribe(JobFinished, on_job_finished)
    subscribe(CampaignFinished, on_campaign_finished)
    subscribe(AdapterPromoted, on_adapter_promoted)


# --------------------------------------------------------------------------- delivery


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex>`` HMAC-SHA256 of ``body`` with ``secret`` (what receivers recompute)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    session_factory: SessionFactory,
    settings: Settings,
    delivery_id: int,
    *,
    client: httpx.Client | None = None,
) -> str:
    """POST one delivery; record DELIVERED, or schedule the next attempt, or FAILED at the cap."""
    with transaction(session_factory) as session:
        repository = WebhookRepository(session)
        delivery = repository.get_delivery(delivery_id)
        if delivery is None or delivery.status != DeliveryStatus.PENDING:
            return "skipped"
        webhook = repository.get(delivery.webhook_id)
        if webhook is None or not webhook.active:
            return "skipped"
        url, event, attempts = webhook.url, delivery.event, delivery.attempts
        secret = webhook.secret or (
            settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
        )
        envelope = {
            "id": delivery.id,
            "event": event,
            "created_at": delivery.created_at.isoformat(),
            "data": delivery.payload,
        }
    timestamp = str(int(time.time()))
    body = json.dumps(
        {**envelope, "timestamp": int(timestamp)}, separators=(",", ":"), sort_keys=True
    ).encode()
    signature = sign(secret, body) if secret else None
    response_status: int | None = None
    error: str | None
    if signature is None:
        ok, error = (
            False,
            "no signing secret: the webhook has none and RECYCLE_WEBHOOK_SECRET is unset",
        )
    else:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "adapter-recycling-webhooks/1",
            SIGNATURE_HEADER: signature,
            TIMESTAMP_HEADER: timestamp,
            EVENT_HEADER: event,
            DELIVERY_HEADER: str(delivery_id),
        }
        try:
            if client is not None:
                response = client.post(url, content=body, headers=headers)
            else:
                with httpx.Client(
                    timeout=settings.webhook_timeout_seconds, follow_redirects=False
                ) as owned:
                    response = owned.post(url, content=body, headers=headers)
            response_status = response.status_code
            ok = 200 <= response.status_code < 300
            error = None if ok else f"HTTP {response.status_code}: {response.text[:500]}"
        except httpx.HTTPError as failure:
            ok, error = False, f"{type(failure).__name__}: {failure}"[:1000]
    return _record_attempt(
        session_factory, settings, delivery_id, attempts + 1, ok, error, response_status, signature
    )


def _record_attempt(
    session_factory: SessionFactory,
    settings: Settings,
    delivery_id: int,
    attempts: int,
    ok: bool,
    error: str | None,
    response_status: int | None,
    signature: str | None,
) -> str:
    now = utcnow()
    with transaction(session_factory) as session:
        repository = WebhookRepository(session)
        common = {"attempts": attempts, "response_status": response_status, "signature": signature}
        if ok:
            repository.update_delivery(
                delivery_id,
                DeliveryStatus.PENDING,
                {
                    **common,
                    "status": DeliveryStatus.DELIVERED,
                    "delivered_at": now,
                    "last_error": None,
                    "next_attempt_at": None,
                },
            )
            return "delivered"
        if attempts >= settings.webhook_max_attempts or signature is None:
            repository.update_delivery(
                delivery_id,
                DeliveryStatus.PENDING,
                {
                    **common,
                    "status": DeliveryStatus.FAILED,
                    "last_error": error,
                    "next_attempt_at": None,
                },
            )
            logger.warning(
                "webhook delivery %s failed for good after %d attempts: %s",
                delivery_id,
                attempts,
                error,
            )
            return "failed"
        delay = backoff_delay(
            attempts, settings.webhook_backoff_seconds, settings.webhook_backoff_max_seconds
        )
        if repository.update_delivery(
            delivery_id,
            DeliveryStatus.PENDING,
            {**common, "last_error": error, "next_attempt_at": now + dt.timedelta(seconds=delay)},
        ):
            enqueue_webhook_delivery(session, delivery_id, countdown=delay)
        return "retry"


def resend_overdue(session_factory: SessionFactory, grace_seconds: float = 120.0) -> int:
    """The reaper's pass: re-send PENDING deliveries whose message was evidently lost."""
    now = utcnow()
    with transaction(session_factory) as session:
        repository = WebhookRepository(session)
        overdue = repository.overdue(now - dt.timedelta(seconds=grace_seconds))
        for delivery_id in overdue:
            repository.update_delivery(
                delivery_id, DeliveryStatus.PENDING, {"next_attempt_at": now}
            )
            enqueue_webhook_delivery(session, delivery_id)
    return len(overdue)
