"""The Celery tasks. They take ids only, reload state, and are safe to run twice.

* ``recycle.run_job(job_id)``: :func:`app.jobs.execution.execute_job` does the work and
  records the outcome (including retries of transient errors, through the job row). Only when
  even that record cannot be written (the database is down) does the task retry its message
  through the broker, with backoff and a cap; the reaper covers anything left after that.
* ``recycle.deliver_webhook(delivery_id)``: :func:`app.webhooks.service.deliver`.
"""

from __future__ import annotations

import logging
import threading
from typing import NoReturn

from celery import Task

from app.campaigns import service as campaigns_service
from app.context import install_context
from app.db.session import create_db_engine, create_session_factory
from app.jobs.execution import TRANSIENT_ERRORS, WorkerContext, create_worker_context, execute_job
from app.observability.logs import job_context
from app.queue import DELIVER_WEBHOOK_TASK, RUN_JOB_TASK, CeleryDispatcher, backoff_delay
from app.settings import get_settings
from app.storage import ArtifactStore
from app.webhooks import service as webhooks_service
from workers.celery_app import celery_app

logger = logging.getLogger(__name__)

BROKER_RETRY_LIMIT = 10
"""Broker-level retries when the registry cannot even record an outcome."""

_context: WorkerContext | None = None
_context_lock = threading.Lock()


def worker_context() -> WorkerContext:
    """This process's context: settings, sessions, artifact store, base-model cache (built once)."""
    global _context
    with _context_lock:
        if _context is None:
            settings = get_settings()
            session_factory = create_session_factory(create_db_engine(settings.database_url))
            store = ArtifactStore(settings.artifact_root)
            install_context(session_factory, settings, store, CeleryDispatcher(celery_app))
            campaigns_service.install()
            webhooks_service.install()
            _context = create_worker_context(settings, session_factory, store)
            logger.info("worker %s: data in %s", _context.worker, settings.data_dir)
        return _context


def _retry_or_raise(task: Task, error: BaseException) -> NoReturn:
    """Retry the message through the broker with backoff; re-raise once the cap is reached."""
    retries = task.request.retries
    if retries >= BROKER_RETRY_LIMIT:
        logger.error(
            "%s%s: giving up after %d broker retries: %s",
            task.name,
            task.request.args,
            retries,
            error,
        )
        raise error
    settings = get_settings()
    countdown = backoff_delay(
        retries + 1, settings.job_retry_backoff_seconds, settings.job_retry_backoff_max_seconds
    )
    raise task.retry(exc=error, countdown=countdown, max_retries=BROKER_RETRY_LIMIT)


@celery_app.task(name=RUN_JOB_TASK, bind=True, ignore_result=True)
def run_job(self: Task, job_id: str) -> str:
    """Run job ``job_id`` (a no-op when it already ended or runs on a live worker)."""
    with job_context(job_id):  # every log line of this run carries job_id
        try:
            return execute_job(worker_context(), job_id)
        except TRANSIENT_ERRORS as error:
            _retry_or_raise(self, error)


@celery_app.task(name=DELIVER_WEBHOOK_TASK, bind=True, ignore_result=True)
def deliver_webhook(self: Task, delivery_id: int) -> str:
    """POST webhook delivery ``delivery_id`` (a no-op once it was delivered or gave up)."""
    context = worker_context()
    try:
        return webhooks_service.deliver(context.session_factory, context.settings, delivery_id)
    except TRANSIENT_ERRORS as error:
        _retry_or_raise(self, error)
