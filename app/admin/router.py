"""``GET /v1/admin/overview``: counts, queue depth, live workers and recent failures."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.admin import service
from app.admin.schemas import OverviewOut
from app.auth.dependencies import ReaderDep
from app.deps import SessionDep, SettingsDep

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/overview", response_model=OverviewOut)
def get_overview(
    request: Request, session: SessionDep, settings: SettingsDep, _: ReaderDep
) -> OverviewOut:
    """What the service is doing now (any role may look; changing things needs more)."""
    return service.overview(session, settings, request.app.state.broker_stats)
