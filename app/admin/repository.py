"""SQL of the operators' view: counts grouped by state, workers seen in job rows, failures.

The metrics collector (``app.observability.metrics``) reads the same numbers at scrape time, so
they are right whichever process (API or worker) changed the rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import (
    Adapter,
    Campaign,
    Job,
    JobStatus,
    ModelVersion,
    RegisteredModel,
    Report,
    Task,
)


@dataclass(frozen=True)
class DurationBuckets:
    """Cumulative counts of finished jobs per ``le`` bound, their sum and count (one label set)."""

    kind: str
    status: str
    cumulative: list[int]
    total_seconds: float
    count: int


def _duration_seconds(session: Session) -> sa.ColumnElement[float]:
    """``finished_at - started_at`` in seconds, in the dialect's own date arithmetic."""
    if session.get_bind().dialect.name == "sqlite":
        return (sa.func.julianday(Job.finished_at) - sa.func.julianday(Job.started_at)) * 86400.0
    return sa.cast(sa.func.extract("epoch", Job.finished_at - Job.started_at), sa.Float)


class AdminRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def _count(self, model: Any, *where: Any) -> int:
        query = sa.select(sa.func.count()).select_from(model)
        for condition in where:
            query = query.where(condition)
        return int(self.session.scalar(query) or 0)

    def resource_counts(self) -> dict[str, int]:
        """Live (not soft-deleted) models, versions, tasks and adapters; campaigns and reports."""
        return {
            "models": self._count(RegisteredModel, RegisteredModel.deleted_at.is_(None)),
            "versions": self._count(ModelVersion, ModelVersion.deleted_at.is_(None)),
            "tasks": self._count(Task, Task.deleted_at.is_(None)),
            "adapters": self._count(Adapter, Adapter.deleted_at.is_(None)),
            "campaigns": self._count(Campaign),
            "reports": self._count(Report),
            "jobs": self._count(Job),
        }

    def _grouped(self, *columns: Any, where: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        query = sa.select(*columns, sa.func.count()).group_by(*columns)
        for condition in where:
            query = query.where(condition)
        return [tuple(row) for row in self.session.execute(query).all()]

    def jobs_by_kind_and_status(self) -> list[tuple[str, str, int]]:
        return [(str(k), str(s), int(n)) for k, s, n in self._grouped(Job.kind, Job.status)]

    def jobs_by_queue_and_status(self) -> list[tuple[str, str, int]]:
        return [(str(q), str(s), int(n)) for q, s, n in self._grouped(Job.queue, Job.status)]

    def adapters_by_status(self) -> dict[str, int]:
        rows = self._grouped(Adapter.status, where=[Adapter.deleted_at.is_(None)])
        return {str(status): int(n) for status, n in rows}

    def campaigns_by_status(self) -> dict[str, int]:
        return {str(status): int(n) for status, n in self._grouped(Campaign.status)}

    def recent_failures(self, limit: int) -> list[Job]:
        """FAILED jobs, the most recently finished first."""
        return list(
            self.session.scalars(
                sa.select(Job)
                .where(Job.status == JobStatus.FAILED)
                .order_by(sa.func.coalesce(Job.finished_at, Job.created_at).desc(), Job.id)
                .limit(limit)
            ).all()
        )

    def worker_jobs(self, seen_since: dt.datetime, limit: int = 500) -> list[Job]:
        """Jobs that are RUNNING, or whose worker wrote a heartbeat since ``seen_since``."""
        return list(
            self.session.scalars(
                sa.select(Job)
                .where(
                    Job.worker.is_not(None),
                    sa.or_(Job.status == JobStatus.RUNNING, Job.heartbeat_at >= seen_since),
                )
                .order_by(Job.heartbeat_at.desc())
                .limit(limit)
            ).all()
        )

    # ---------------------------------------------------------------- metrics

    def job_durations(self, bounds: Sequence[float]) -> list[DurationBuckets]:
        """Histogram of finished jobs' run time (last attempt) per kind and final status."""
        duration = _duration_seconds(self.session)
        bucket_columns = [sa.func.sum(sa.case((duration <= bound, 1), else_=0)) for bound in bounds]
        query = (
            sa.select(
                Job.kind,
                Job.status,
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(duration), 0.0),
                *bucket_columns,
            )
            .where(
                Job.status.in_([JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]),
                Job.started_at.is_not(None),
                Job.finished_at.is_not(None),
            )
            .group_by(Job.kind, Job.status)
        )
        result = []
        for kind, status, count, total, *buckets in self.session.execute(query).all():
            result.append(
                DurationBuckets(
                    kind=str(kind),
                    status=str(status),
                    cumulative=[int(b or 0) for b in buckets],
                    total_seconds=max(0.0, float(total or 0.0)),
                    count=int(count),
                )
            )
        return result

    def cost_totals_by_kind(self) -> dict[str, dict[str, float]]:
        """Sum of ``cost.device_seconds``, ``cost.wall_seconds`` and ``cost.tokens`` per job kind."""
        fields = ("device_seconds", "wall_seconds", "tokens")
        columns = [sa.func.coalesce(sa.func.sum(Job.cost[f].as_float()), 0.0) for f in fields]
        rows = self.session.execute(
            sa.select(Job.kind, *columns)
            .where(Job.status.in_([JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]))
            .group_by(Job.kind)
        ).all()
        return {
            str(kind): {field: float(value or 0.0) for field, value in zip(fields, values)}
            for kind, *values in rows
        }
