"""Store and read job reports (``recycling_core.reports.Report`` documents)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.db import Report
from app.errors import BadRequest, NotFound
from app.pagination import Paged, Pagination
from app.reports.repository import ReportRepository
from recycling_core.reports import Report as ReportDocument


def store_report(
    session: Session, document: ReportDocument | Mapping[str, Any], *, job_id: str | None = None
) -> Report:
    """Validate a report document against the core schema and store it; its id is the report's."""
    try:
        parsed = (
            document
            if isinstance(document, ReportDocument)
            else ReportDocument.model_validate(dict(document))
        )
    except ValidationError as error:
        raise BadRequest(f"invalid report document: {error}", code="InvalidReport") from error
    if job_id is not None and parsed.job_id not in (None, job_id):
        raise BadRequest(
            f"report belongs to job {parsed.job_id}, not {job_id}", code="InvalidReport"
        )
    if job_id is not None and parsed.job_id is None:
        parsed = parsed.model_copy(update={"job_id": job_id})
    report = Report(
        id=parsed.report_id,
        job_id=parsed.job_id,
        kind=parsed.kind,
        schema_version=parsed.schema_version,
        document=parsed.model_dump(mode="json"),
    )
    return ReportRepository(session).add(report)


def get_report(session: Session, report_id: str) -> Report:
    report = ReportRepository(session).get(report_id)
    if report is None:
        raise NotFound(f"report {report_id!r} does not exist", code="ReportNotFound")
    return report


def list_reports(
    session: Session, page: Pagination, *, job_id: str | None = None, kind: str | None = None
) -> Paged[Report]:
    """Reports, newest first, optionally of one job or one kind."""
    rows, total = ReportRepository(session).list(page, job_id=job_id, kind=kind)
    return Paged(rows, total, page)
