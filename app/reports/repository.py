"""SQL of reports."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Report
from app.pagination import Pagination


class ReportRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, report_id: str) -> Report | None:
        return self.session.get(Report, report_id)

    def add(self, report: Report) -> Report:
        self.session.add(report)
        self.session.flush()
        return report

    def list(
        self, page: Pagination, *, job_id: str | None = None, kind: str | None = None
    ) -> tuple[list[Report], int]:
        query = sa.select(Report)
        if job_id is not None:
            query = query.where(Report.job_id == job_id)
        if kind is not None:
            query = query.where(Report.kind == kind)
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(Report.created_at.desc(), Report.id)
            .limit(page.limit)
            .offset(page.offset)
        ).all()
        return list(rows), total
