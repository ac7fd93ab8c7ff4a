"""``/v1/jobs`` (create any kind, list, read, follow, cancel, retry) and ``POST /v1/adapters/train``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Request, status
from fastapi.responses import StreamingResponse

from app.auth.dependencies import PlatformDep, ReaderDep
from app.db import JobKind, JobStatus
from app.deps import SessionDep, SettingsDep
from app.jobs import service
from app.jobs.repository import JobQuery
from app.jobs.schemas import JobCreate, JobOut, TrainAdapterRequest, TrainJobParams
from app.pagination import Page, PaginationDep, page_of

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
train_router = APIRouter(prefix="/v1/adapters", tags=["adapters"])

MIN_EVENT_POLL_SECONDS = 0.2
MAX_EVENT_POLL_SECONDS = 2.0


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def create_job(
    body: Annotated[JobCreate, Body()], session: SessionDep, settings: SettingsDep, _: PlatformDep
) -> JobOut:
    job = service.create_job(
        session, settings, body.kind, body.params, max_attempts=body.max_attempts
    )
    return JobOut.model_validate(job)


@router.get("", response_model=Page[JobOut])
def list_jobs(
    session: SessionDep,
    page: PaginationDep,
    _: ReaderDep,
    status_filter: Annotated[JobStatus | None, Query(alias="status")] = None,
    kind: JobKind | None = None,
    campaign: str | None = None,
) -> Page[JobOut]:
    filters = JobQuery(status=status_filter, kind=kind, campaign_id=campaign)
    return page_of(service.list_jobs(session, filters, page), JobOut)


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: str, session: SessionDep, _: ReaderDep) -> JobOut:
    return JobOut.model_validate(service.get_job(session, job_id))


@router.get(
    "/{job_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "progress events"}},
)
def job_events(
    job_id: str, request: Request, session: SessionDep, settings: SettingsDep, _: ReaderDep
) -> StreamingResponse:
    """Server-sent events: ``progress`` whenever the job row changes, then a final ``status``."""
    poll = min(
        max(settings.progress_throttle_seconds, MIN_EVENT_POLL_SECONDS), MAX_EVENT_POLL_SECONDS
    )
    stream = service.follow_job(  # 404 before the stream starts
        session, job_id, poll_seconds=poll, fallback_factory=request.app.state.session_factory
    )
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def cancel_job(job_id: str, session: SessionDep, _: PlatformDep) -> JobOut:
    return JobOut.model_validate(service.cancel_job(session, job_id))


@router.post("/{job_id}/retry", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def retry_job(job_id: str, session: SessionDep, settings: SettingsDep, _: PlatformDep) -> JobOut:
    """A FAILED or CANCELLED job runs again: same id and parameters, a fresh attempt budget."""
    return JobOut.model_validate(service.retry_job(session, settings, job_id))


@train_router.post("/train", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def train_adapter(
    body: TrainAdapterRequest, session: SessionDep, settings: SettingsDep, _: PlatformDep
) -> JobOut:
    params = TrainJobParams.model_validate(body.model_dump(exclude={"max_attempts"}))
    job = service.create_job(
        session, settings, JobKind.TRAIN, params, max_attempts=body.max_attempts
    )
    return JobOut.model_validate(job)
