"""The operators' overview: counts, queue depth per queue, live workers, recent failures."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from app.admin.broker import BrokerStats
from app.admin.repository import AdminRepository
from app.admin.schemas import (
    BrokerOut,
    FailureOut,
    OverviewOut,
    QueueOut,
    WorkerJobOut,
    WorkerOut,
)
from app.db import Job, JobKind, JobStatus, utcnow
from app.settings import Settings

RECENT_FAILURES = 10
WORKER_SEEN_WINDOW = dt.timedelta(hours=1)
"""A worker that wrote a job heartbeat within this window is listed (idle when it runs none)."""


def _worker_job(job: Job) -> WorkerJobOut:
    return WorkerJobOut(
        id=job.id,
        kind=job.kind.value,
        status=job.status.value,
        campaign_id=job.campaign_id,
        progress=job.progress or {},
        heartbeat_at=job.heartbeat_at,
    )


def _workers(
    jobs: list[Job], broker_workers: dict[str, list[str]] | None, lost_before: dt.datetime
) -> list[WorkerOut]:
    """Workers from job rows (heartbeats), completed by those that answered the broker."""
    by_name: dict[str, WorkerOut] = {}
    for job in jobs:
        assert job.worker is not None
        worker = by_name.setdefault(
            job.worker,
            WorkerOut(
                name=job.worker,
                state="idle",
                last_heartbeat_at=None,
                answered_broker=False,
                running=[],
            ),
        )
        if job.heartbeat_at and (
            worker.last_heartbeat_at is None or job.heartbeat_at > worker.last_heartbeat_at
        ):
            worker.last_heartbeat_at = job.heartbeat_at
        if job.status == JobStatus.RUNNING:
            worker.running.append(_worker_job(job))
    for worker in by_name.values():
        if worker.running:
            fresh = any(j.heartbeat_at and j.heartbeat_at >= lost_before for j in worker.running)
            worker.state = "busy" if fresh else "lost"
    for name, job_ids in (broker_workers or {}).items():
        # Celery names a worker ``name@host``; its job rows say ``host:pid``. A busy worker is
        # recognised by the jobs it runs; an idle one is listed under its Celery name.
        same = next(
            (
                w
                for w in by_name.values()
                if not w.answered_broker and any(job.id in job_ids for job in w.running)
            ),
            None,
        )
        if same is not None:
            same.answered_broker = True
            same.name = f"{name} ({same.name})"
            continue
        by_name[name] = WorkerOut(
            name=name,
            state="busy" if job_ids else "idle",
            last_heartbeat_at=None,
            answered_broker=True,
            running=[],
        )
    order = {"busy": 0, "lost": 1, "idle": 2}
    return sorted(by_name.values(), key=lambda w: (order.get(w.state, 3), w.name))


def overview(session: Session, settings: Settings, broker: BrokerStats) -> OverviewOut:
    """Everything the dashboard's first page and ``recycle admin overview`` show."""
    repository = AdminRepository(session)
    now = utcnow()
    jobs_by_kind: dict[str, dict[str, int]] = {kind.value: {} for kind in JobKind}
    jobs_by_status: dict[str, int] = {status.value: 0 for status in JobStatus}
    for kind, status, count in repository.jobs_by_kind_and_status():
        jobs_by_kind.setdefault(kind, {})[status] = count
        jobs_by_status[status] = jobs_by_status.get(status, 0) + count
    per_queue: dict[str, dict[str, int]] = {}
    for queue, status, count in repository.jobs_by_queue_and_status():
        per_queue.setdefault(queue, {})[status] = count
    depths = broker.queue_depths()
    queues = [
        QueueOut(
            name=name,
            depth=depths.depths.get(name),
            queued_jobs=per_queue.get(name, {}).get(JobStatus.QUEUED.value, 0),
            running_jobs=per_queue.get(name, {}).get(JobStatus.RUNNING.value, 0),
        )
        for name in broker.queues
    ]
    broker_workers = broker.workers()
    workers = _workers(
        repository.worker_jobs(now - WORKER_SEEN_WINDOW),
        {w.name: w.job_ids for w in broker_workers} if broker_workers is not None else None,
        now - dt.timedelta(seconds=settings.worker_lost_seconds),
    )
    failures = [
        FailureOut(
            id=job.id,
            kind=job.kind.value,
            campaign_id=job.campaign_id,
            error_code=job.error_code,
            error_message=job.error_message,
            attempts=job.attempts,
            finished_at=job.finished_at,
        )
        for job in repository.recent_failures(RECENT_FAILURES)
    ]
    return OverviewOut(
        generated_at=now,
        counts=repository.resource_counts(),
        jobs_by_status=jobs_by_status,
        jobs_by_kind=jobs_by_kind,
        adapters_by_status=repository.adapters_by_status(),
        campaigns_by_status=repository.campaigns_by_status(),
        queues=queues,
        broker=BrokerOut(transport=broker.transport, ok=depths.error is None, error=depths.error),
        workers=workers,
        recent_failures=failures,
    )
