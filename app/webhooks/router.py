"""``/v1/webhooks``: subscribe a URL to events, list, delete, and see its deliveries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from app.auth.dependencies import PlatformDep
from app.db.base import INT_MAX
from app.deps import SessionDep
from app.pagination import Page, PaginationDep, page_of
from app.webhooks import service
from app.webhooks.schemas import DeliveryOut, WebhookCreate, WebhookCreated, WebhookOut

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

WebhookId = Annotated[int, Path(ge=1, le=INT_MAX)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=WebhookCreated)
def create_webhook(body: WebhookCreate, session: SessionDep, _: PlatformDep) -> WebhookCreated:
    webhook, secret = service.create_webhook(session, body.url, list(body.events))
    return WebhookCreated(**WebhookOut.model_validate(webhook).model_dump(), secret=secret)


@router.get("", response_model=Page[WebhookOut])
def list_webhooks(session: SessionDep, page: PaginationDep, _: PlatformDep) -> Page[WebhookOut]:
    return page_of(service.list_webhooks(session, page), WebhookOut)


@router.get("/{webhook_id}", response_model=WebhookOut)
def get_webhook(webhook_id: WebhookId, session: SessionDep, _: PlatformDep) -> WebhookOut:
    return WebhookOut.model_validate(service.get_webhook(session, webhook_id))


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook(webhook_id: WebhookId, session: SessionDep, _: PlatformDep) -> None:
    service.delete_webhook(session, webhook_id)


@router.get("/{webhook_id}/deliveries", response_model=Page[DeliveryOut])
def list_deliveries(
    webhook_id: WebhookId, session: SessionDep, page: PaginationDep, _: PlatformDep
) -> Page[DeliveryOut]:
    return page_of(service.list_deliveries(session, webhook_id, page), DeliveryOut)
