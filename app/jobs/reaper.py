"""The reaper: no job stays RUNNING forever, no QUEUED job waits for a message that never comes.

With ``acks_late`` and ``reject_on_worker_lost`` Redis redelivers a dead worker's message only
after its visibility timeout, and kombu's SQLAlchemy transport never redelivers one. So the
registry is the source of truth: a RUNNING job whose heartbeat is older than
``worker_lost_seconds`` belongs to a lost worker and is

* CANCELLED when a cancel was asked for,
* FAILED (``WorkerLost``) when it used all of its ``max_attempts``,
* otherwise QUEUED again with a fresh message (the next attempt resumes from its checkpoint).

Each change is one compare-and-set in its own transaction: a worker that comes back to life, a
redelivered message and a second reaper (several API processes) cannot double-act. The same
pass re-sends messages that were never sent (broker down at commit time) or are long overdue,
steps unfinished campaigns, and re-sends overdue webhook deliveries. When the broker restarted
since the last pass (Redis's ``run_id`` changed: a Redis without persistence comes back empty),
every QUEUED job and PENDING delivery gets its message again at once instead of waiting for
``queued_redispatch_seconds`` (running a message twice is a no-op).

:func:`run_maintenance` is one pass (tests call it); :class:`Reaper` runs it periodically in
the API process (a lifespan background task).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field

from app.campaigns import service as campaigns_service
from app.db import JobStatus, utcnow
from app.db.session import SessionFactory, transaction
from app.events import record_event
from app.jobs.repository import JobRepository
from app.jobs.service import JobFinished
from app.queue import broker_instance_id, enqueue_job
from app.settings import Settings
from app.webhooks import service as webhooks_service

logger = logging.getLogger(__name__)


@dataclass
class MaintenanceReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)
    campaigns_stepped: int = 0
    deliveries_resent: int = 0


def _reap_one(
    session_factory: SessionFactory,
    job_id: str,
    stale_before: dt.datetime,
    report: MaintenanceReport,
) -> None:
    with transaction(session_factory) as session:
        repository = JobRepository(session)
        job = repository.lock(job_id)
        if job is None or job.status != JobStatus.RUNNING:
            return
        lost = job.worker or "unknown worker"
        last = job.heartbeat_at.isoformat() if job.heartbeat_at else "never"
        now = utcnow()
        if job.cancel_requested:
            values = {
                "status": JobStatus.CANCELLED,
                "finished_at": now,
                "error_code": "Cancelled",
                "error_message": f"cancelled; worker {lost} was lost (last heartbeat {last})",
            }
            outcome = report.cancelled
        elif job.attempts >= job.max_attempts:
            values = {
                "status": JobStatus.FAILED,
                "finished_at": now,
                "error_code": "WorkerLost",
                "error_message": f"worker {lost} was lost (last heartbeat {last}) on attempt "
                f"{job.attempts} of {job.max_attempts}; no attempts left",
            }
            outcome = report.failed
        else:
            values = {
                "status": JobStatus.QUEUED,
                "worker": None,
                "error_code": "WorkerLost",
                "error_message": f"worker {lost} was lost (last heartbeat {last}) on attempt "
                f"{job.attempts} of {job.max_attempts}; re-queued",
            }
            outcome = report.requeued
        if not repository.finish_stale(job_id, stale_before, values):
            return  # the worker came back, or someone else acted first
        job = repository.get_fresh(job_id)
        assert job is not None
        if job.status == JobStatus.QUEUED:
            enqueue_job(session, job)
        else:
            record_event(session, JobFinished.of(job))
        outcome.append(job_id)
        logger.warning("job %s: %s", job_id, values["error_message"])


def reap_lost_jobs(
    session_factory: SessionFactory, settings: Settings, *, now: dt.datetime | None = None
) -> MaintenanceReport:
    """Re-queue, fail or cancel RUNNING jobs whose worker stopped heartbeating."""
    report = MaintenanceReport()
    stale_before = (now or utcnow()) - dt.timedelta(seconds=settings.worker_lost_seconds)
    with transaction(session_factory) as session:
        stale = JobRepository(session).stale_running(stale_before)
    for job_id in stale:
        try:
            _reap_one(session_factory, job_id, stale_before, report)
        except Exception:
            logger.exception("job %s: could not reap", job_id)
    return report


def redispatch_queued_jobs(
    session_factory: SessionFactory,
    settings: Settings,
    *,
    now: dt.datetime | None = None,
    everything: bool = False,
) -> list[str]:
    """Send again the messages of QUEUED jobs never sent, or sent long ago and still waiting.

    ``everything``: every QUEUED job's message (the broker restarted and lost its queues).
    """
    delay = 0.0 if everything else settings.queued_redispatch_seconds
    before = (now or utcnow()) - dt.timedelta(seconds=delay)
    with transaction(session_factory) as session:
        job_ids = JobRepository(session).undispatched(before)
    sent = []
    for job_id in job_ids:
        with transaction(session_factory) as session:
            job = JobRepository(session).lock(job_id)
            if job is None or job.status != JobStatus.QUEUED:
                continue
            if job.dispatched_at is not None and job.dispatched_at >= before:
                continue  # sent meanwhile
            enqueue_job(session, job)
            sent.append(job_id)
    return sent


def run_maintenance(
    session_factory: SessionFactory,
    settings: Settings,
    *,
    now: dt.datetime | None = None,
    broker_restarted: bool = False,
) -> MaintenanceReport:
    """One pass of everything the reaper does.

    ``broker_restarted``: the broker came back empty, so every QUEUED job and PENDING webhook
    delivery gets its message again now (running one twice is a no-op).
    """
    report = reap_lost_jobs(session_factory, settings, now=now)
    for name, step in (
        (
            "redispatch",
            lambda: report.redispatched.extend(
                redispatch_queued_jobs(
                    session_factory, settings, now=now, everything=broker_restarted
                )
            ),
        ),
        (
            "campaigns",
            lambda: setattr(
                report,
                "campaigns_stepped",
                campaigns_service.advance_running_campaigns(session_factory),
            ),
        ),
        (
            "webhooks",
            lambda: setattr(
                report,
                "deliveries_resent",
                webhooks_service.resend_overdue(
                    session_factory, **({"grace_seconds": 0.0} if broker_restarted else {})
                ),
            ),
        ),
    ):
        try:
            step()
        except Exception:
            logger.exception("maintenance step %s failed", name)
    return report


class BrokerWatch:
    """Tells when the broker restarted since the last look (its instance id changed)."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._seen: str | None = None

    def restarted(self) -> bool:
        current = broker_instance_id(self.broker_url)
        if current is None:  # down, or a broker that cannot tell: decide on the next look
            return False
        restarted = self._seen is not None and current != self._seen
        if restarted:
            logger.warning("the broker restarted; sending the messages of waiting work again")
        self._seen = current
        return restarted


class Reaper:
    """Runs :func:`run_maintenance` every ``reaper_interval_seconds`` in a background task."""

    def __init__(self, session_factory: SessionFactory, settings: Settings) -> None:
        self.session_factory = session_factory
        self.settings = settings
        self.broker = BrokerWatch(settings.broker_url)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.settings.reaper_interval_seconds > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="job-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reaper_interval_seconds)
            try:
                restarted = await asyncio.to_thread(self.broker.restarted)
                report = await asyncio.to_thread(
                    run_maintenance,
                    self.session_factory,
                    self.settings,
                    broker_restarted=restarted,
                )
                if report.requeued or report.failed or report.cancelled or report.redispatched:
                    logger.info("reaper: %s", report)
            except Exception:
                logger.exception("reaper pass failed")
