"""``GET /metrics``: the Prometheus exposition (any API key, or none with metrics_public)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.auth.dependencies import KeyCacheDep, principal_from_credentials
from app.deps import SessionDep, SettingsDep
from app.observability.metrics import METRICS_CONTENT_TYPE, ServiceMetrics

router = APIRouter(tags=["observability"])

_bearer = HTTPBearer(auto_error=False)
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    cache: KeyCacheDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key_header)],
) -> Response:
    """Any valid key (reader and up) unless ``RECYCLE_METRICS_PUBLIC`` opens the endpoint.

    The registry counts are read in this request's transaction (one connection per scrape).
    """
    if not settings.metrics_public:
        principal_from_credentials(session, settings, cache, bearer, api_key)
    service_metrics: ServiceMetrics = request.app.state.metrics
    return Response(service_metrics.render(session), media_type=METRICS_CONTENT_TYPE)
