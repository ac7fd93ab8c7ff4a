"""``/v1/reports``: read job reports."""

from __future__ import annotations

from fastapi import APIRouter

from app.auth.dependencies import ReaderDep
from app.deps import SessionDep
from app.pagination import Page, PaginationDep, page_of
from app.reports import service
from app.reports.schemas import ReportOut, ReportSummary

router = APIRouter(prefix="/v1/reports", tags=["reports"])


@router.get("", response_model=Page[ReportSummary])
def list_reports(
    session: SessionDep,
    page: PaginationDep,
    _: ReaderDep,
    job: str | None = None,
    kind: str | None = None,
) -> Page[ReportSummary]:
    return page_of(service.list_reports(session, page, job_id=job, kind=kind), ReportSummary)


@router.get("/{report_id}", response_model=ReportOut)
def get_report(report_id: str, session: SessionDep, _: ReaderDep) -> ReportOut:
    return ReportOut.model_validate(service.get_report(session, report_id))
