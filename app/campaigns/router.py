"""``/v1/models/{model}/policy`` and ``/v1/campaigns``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, status

from app.auth.dependencies import PlatformDep, ReaderDep
from app.campaigns import service
from app.campaigns.schemas import (
    CampaignCreate,
    CampaignDetail,
    CampaignOut,
    Gates,
    PolicyIn,
    PolicyOut,
)
from app.db import CampaignStatus
from app.deps import SessionDep, SettingsDep
from app.jobs.schemas import JobOut
from app.pagination import Page, PaginationDep

policy_router = APIRouter(prefix="/v1/models", tags=["campaigns"])
router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"])


def _policy_out(view: service.PolicyView) -> PolicyOut:
    values = view.values
    return PolicyOut(
        model=view.model.name,
        methods=list(values.methods),
        step_budget=values.step_budget,
        few_shot=values.few_shot,
        fresh_baseline=values.fresh_baseline,
        gates=Gates.model_validate(values.gates.model_dump()),
        training=values.training.overrides(),
        auto_campaign=values.auto_campaign,
        is_default=view.row is None,
        updated_at=view.row.updated_at if view.row is not None else None,
    )


def _campaign_out(view: service.CampaignView) -> dict[str, Any]:
    campaign = view.campaign
    return {
        "id": campaign.id,
        "model": view.to_version.model.name,
        "from_version": view.from_version.version,
        "to_version": view.to_version.version,
        "from_version_id": campaign.from_version_id,
        "to_version_id": campaign.to_version_id,
        "trigger": campaign.trigger,
        "status": campaign.status,
        "policy": campaign.policy,
        "summary": campaign.summary,
        "created_at": campaign.created_at,
        "started_at": campaign.started_at,
        "finished_at": campaign.finished_at,
    }


@policy_router.get("/{model}/policy", response_model=PolicyOut)
def get_policy(model: str, session: SessionDep, _: ReaderDep) -> PolicyOut:
    return _policy_out(service.get_policy(session, model))


@policy_router.put("/{model}/policy", response_model=PolicyOut)
def set_policy(model: str, body: PolicyIn, session: SessionDep, _: PlatformDep) -> PolicyOut:
    return _policy_out(service.set_policy(session, model, body))


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=CampaignDetail)
def create_campaign(
    body: CampaignCreate, session: SessionDep, settings: SettingsDep, _: PlatformDep
) -> CampaignDetail:
    campaign = service.create_campaign(session, settings, body)
    view = service.get_campaign(session, campaign.id)
    return CampaignDetail(
        **_campaign_out(view), jobs=[JobOut.model_validate(job) for job in view.jobs]
    )


@router.get("", response_model=Page[CampaignOut])
def list_campaigns(
    session: SessionDep,
    page: PaginationDep,
    _: ReaderDep,
    model: str | None = None,
    status_filter: Annotated[CampaignStatus | None, Query(alias="status")] = None,
) -> Page[CampaignOut]:
    result = service.list_campaigns(session, page, model=model, status=status_filter)
    return Page[CampaignOut](
        items=[CampaignOut(**_campaign_out(view)) for view in result.items],
        total=result.total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get("/{campaign_id}", response_model=CampaignDetail)
def get_campaign(campaign_id: str, session: SessionDep, _: ReaderDep) -> CampaignDetail:
    view = service.get_campaign(session, campaign_id)
    return CampaignDetail(
        **_campaign_out(view), jobs=[JobOut.model_validate(job) for job in view.jobs]
    )
