"""SQL of jobs: listing, and the compare-and-set updates that keep a job owned by one worker.

Every state change a worker or the reaper makes is one ``UPDATE … WHERE`` whose condition is
the state it expects (``status``, ``worker``, heartbeat age); the row count says whether it won.
Two workers (or a worker and the reaper) racing for one job cannot both win. On SQLite these
statements are the first of their transaction, so they wait for the write lock instead of
failing on a stale read snapshot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Job, JobKind, JobStatus
from app.pagination import Pagination


@dataclass(frozen=True)
class JobQuery:
    status: JobStatus | None = None
    kind: JobKind | None = None
    campaign_id: str | None = None


@dataclass(frozen=True)
class JobControl:
    """What a running job's worker polls: is it still mine, and was a cancel asked for."""

    status: JobStatus
    worker: str | None
    cancel_requested: bool


class JobRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # ---------------------------------------------------------------- reads

    def get(self, job_id: str) -> Job | None:
        return self.session.get(Job, job_id)

    def get_fresh(self, job_id: str) -> Job | None:
        """The row as the database has it now (not the identity map's copy)."""
        return self.session.get(Job, job_id, populate_existing=True)

    def lock(self, job_id: str) -> Job | None:
        """The row, locked until the transaction ends (call it first in the transaction).

        PostgreSQL: ``SELECT … FOR UPDATE``. SQLite: a no-op ``UPDATE`` first takes the
        database write lock, waiting for it, instead of reading a snapshot that a concurrent
        commit would make stale (SQLite then refuses the later write: "database is locked").
        """
        if self.session.get_bind().dialect.name == "sqlite":
            self.session.execute(
                sa.update(Job)
                .where(Job.id == job_id)
                .values(status=Job.status)
                .execution_options(synchronize_session=False)
            )
        return self.session.scalar(
            sa.select(Job)
            .where(Job.id == job_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )

    def add(self, job: Job) -> Job:
        self.session.add(job)
        self.session.flush()
        return job

    def page(self, filters: JobQuery, page: Pagination) -> tuple[list[Job], int]:
        query = sa.select(Job)
        if filters.status is not None:
            query = query.where(Job.status == filters.status)
        if filters.kind is not None:
            query = query.where(Job.kind == filters.kind)
        if filters.campaign_id is not None:
            query = query.where(Job.campaign_id == filters.campaign_id)
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(Job.created_at.desc(), Job.id).limit(page.limit).offset(page.offset)
        ).all()
        return list(rows), total

    def control(self, job_id: str) -> JobControl | None:
        row = self.session.execute(
            sa.select(Job.status, Job.worker, Job.cancel_requested).where(Job.id == job_id)
        ).first()
        if row is None:
            return None
        return JobControl(JobStatus(row.status), row.worker, bool(row.cancel_requested))

    def campaign_jobs(self, campaign_id: str) -> list[Job]:
        return list(
            self.session.scalars(
                sa.select(Job)
                .where(Job.campaign_id == campaign_id)
                .order_by(Job.created_at, Job.id)
            ).all()
        )

    def stale_running(self, heartbeat_before: dt.datetime, limit: int = 100) -> list[str]:
        """RUNNING jobs whose worker wrote no heartbeat since ``heartbeat_before``."""
        return list(
            self.session.scalars(
                sa.select(Job.id)
                .where(
                    Job.status == JobStatus.RUNNING,
                    sa.func.coalesce(Job.heartbeat_at, Job.started_at, Job.created_at)
                    < heartbeat_before,
                )
                .order_by(Job.heartbeat_at)
                .limit(limit)
            ).all()
        )

    def queued_of_kind(self, kind: JobKind, *, exclude: str, limit: int) -> list[Job]:
        """QUEUED jobs of one kind, oldest first, that no cancel was asked for."""
        return list(
            self.session.scalars(
                sa.select(Job)
                .where(
                    Job.kind == kind,
                    Job.status == JobStatus.QUEUED,
                    Job.cancel_requested.is_(False),
                    Job.attempts < Job.max_attempts,
                    Job.id != exclude,
                )
                .order_by(Job.created_at, Job.id)
                .limit(limit)
            ).all()
        )

    def undispatched(self, dispatched_before: dt.datetime, limit: int = 100) -> list[str]:
        """QUEUED jobs whose message was never sent, or was sent before ``dispatched_before``."""
        return list(
            self.session.scalars(
                sa.select(Job.id)
                .where(
                    Job.status == JobStatus.QUEUED,
                    sa.or_(Job.dispatched_at.is_(None), Job.dispatched_at < dispatched_before),
                )
                .order_by(Job.created_at)
                .limit(limit)
            ).all()
        )

    # ---------------------------------------------------------------- compare-and-set writes

    def _update(self, job_id: str, condition: Sequence[Any], values: dict[str, Any]) -> bool:
        result = self.session.execute(
            sa.update(Job)
            .where(Job.id == job_id, *condition)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def claim(
        self, job_id: str, worker: str, now: dt.datetime, *, stale_before: dt.datetime
    ) -> bool:
        """QUEUED (or RUNNING for a lost worker, or a stale claim of ``worker`` itself) → RUNNING.

        Counts the attempt; refuses once ``attempts`` reached ``max_attempts`` or a cancel was
        asked for (the caller then ends the job instead).
        """
        return self._update(
            job_id,
            (
                Job.attempts < Job.max_attempts,
                Job.cancel_requested.is_(False),
                sa.or_(
                    Job.status == JobStatus.QUEUED,
                    sa.and_(
                        Job.status == JobStatus.RUNNING,
                        sa.or_(
                            Job.worker == worker,
                            sa.func.coalesce(Job.heartbeat_at, Job.started_at, Job.created_at)
                            < stale_before,
                        ),
                    ),
                ),
            ),
            {
                "status": JobStatus.RUNNING,
                "attempts": Job.attempts + 1,
                "worker": worker,
                "started_at": now,
                "heartbeat_at": now,
                "finished_at": None,
            },
        )

    def heartbeat(
        self, job_id: str, worker: str, now: dt.datetime, progress: dict[str, Any] | None = None
    ) -> bool:
        """Refresh the heartbeat (and progress) of a job ``worker`` still owns."""
        values: dict[str, Any] = {"heartbeat_at": now}
        if progress is not None:
            values["progress"] = progress
        return self._update(job_id, (Job.status == JobStatus.RUNNING, Job.worker == worker), values)

    def finish_owned(self, job_id: str, worker: str, values: dict[str, Any]) -> bool:
        """End (or re-queue) a RUNNING job that ``worker`` owns."""
        return self._update(job_id, (Job.status == JobStatus.RUNNING, Job.worker == worker), values)

    def finish_stale(self, job_id: str, stale_before: dt.datetime, values: dict[str, Any]) -> bool:
        """End (or re-queue) a RUNNING job whose worker went silent before ``stale_before``."""
        return self._update(
            job_id,
            (
                Job.status == JobStatus.RUNNING,
                sa.func.coalesce(Job.heartbeat_at, Job.started_at, Job.created_at) < stale_before,
            ),
            values,
        )

    def finish_queued(self, job_id: str, values: dict[str, Any]) -> bool:
        """End a QUEUED job (cancelled, or out of attempts)."""
        return self._update(job_id, (Job.status == JobStatus.QUEUED,), values)

    def request_cancel(self, job_id: str) -> bool:
        return self._update(job_id, (Job.status == JobStatus.RUNNING,), {"cancel_requested": True})

    def requeue_finished(self, job_id: str, values: dict[str, Any]) -> bool:
        """FAILED or CANCELLED → QUEUED again (a manual retry); False when it is in another state."""
        return self._update(
            job_id, (Job.status.in_([JobStatus.FAILED, JobStatus.CANCELLED]),), values
        )
