"""The one Celery configuration, and job dispatch that waits for the transaction to commit.

The API and the workers build their Celery app with :func:`create_celery_app` from the same
``Settings``: broker from ``RECYCLE_BROKER_URL`` (embedded default: kombu's SQLAlchemy
transport on ``<data_dir>/broker.sqlite``; production: Redis), queues ``gpu`` and ``cpu``,
late acknowledgement, prefetch 1, JSON only, no result backend (results live in the registry).

Services never send messages themselves. They call :func:`enqueue_job` (or
:func:`enqueue_webhook_delivery`) inside their transaction; the ids are buffered on the session
and sent by an after-commit step run by the transaction owner (``app.deps.get_session`` or a
worker's ``session_scope``). A rolled-back transaction sends nothing.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from celery import Celery
from kombu import Exchange, Queue
from sqlalchemy.orm import Session

from app.db import Job, JobQueue, utcnow
from app.db.session import call_after_commit, call_after_rollback
from app.settings import Settings, get_settings

logger = logging.getLogger(__name__)

RUN_JOB_TASK = "recycle.run_job"
DELIVER_WEBHOOK_TASK = "recycle.deliver_webhook"
WEBHOOK_QUEUE = JobQueue.CPU
"""Webhook deliveries are short HTTP calls: they never wait behind GPU work on a GPU worker."""

DISPATCHER_KEY = "job_dispatcher"
"""``Session.info`` key of the dispatcher the transaction owner installed (see create_app)."""
_PENDING_KEY = "pending_dispatch"

BROKER_CONNECT_TIMEOUT_SECONDS = 5.0
PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}
"""A broker that is down must not hold a request for long: the reaper re-sends later."""


def _queues() -> tuple[Queue, ...]:
    return tuple(
        Queue(queue.value, Exchange(queue.value, type="direct"), routing_key=queue.value)
        for queue in JobQueue
    )


def _transport_options(broker_url: str) -> dict[str, Any]:
    # kombu's SQLAlchemy transport hands its options to create_engine: give it none.
    if broker_url.startswith(("redis://", "rediss://", "redis+socket://")):
        return {"socket_connect_timeout": BROKER_CONNECT_TIMEOUT_SECONDS}
    return {}


def create_celery_app(settings: Settings | None = None, *, main: str = "recycle") -> Celery:
    """The Celery app of the API (sending) and the workers (consuming), from ``settings``."""
    settings = settings or get_settings()
    broker_url = settings.broker_url
    if broker_url.startswith("sqla+sqlite:///"):
        Path(broker_url.removeprefix("sqla+sqlite:///")).expanduser().parent.mkdir(
            parents=True, exist_ok=True
        )
    app = Celery(main, broker=broker_url, backend=settings.result_backend, set_as_current=False)
    app.conf.update(
        task_queues=_queues(),
        task_default_queue=JobQueue.CPU.value,
        task_default_exchange=JobQueue.CPU.value,
        task_default_routing_key=JobQueue.CPU.value,
        # A message is acknowledged only when its task returns; a worker that dies mid-job
        # leaves it unacknowledged (Redis redelivers after its visibility timeout; the reaper
        # covers transports that never redeliver, such as the SQLAlchemy one).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        task_publish_retry_policy=PUBLISH_RETRY_POLICY,
        broker_connection_timeout=BROKER_CONNECT_TIMEOUT_SECONDS,
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(broker_url),
        worker_send_task_events=True,
        task_send_sent_event=False,
        enable_utc=True,
        timezone="UTC",
    )
    return app


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff with jitter: base·2^(attempt−1), at most ``cap``, ±20 %."""
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    return delay * random.uniform(0.8, 1.2) if delay > 0 else 0.0


# --------------------------------------------------------------------------- dispatch


class Dispatcher(Protocol):
    """Sends the messages of jobs and webhook deliveries (the broker, or a test double)."""

    def send_job(self, job_id: str, queue: str, *, countdown: float | None = None) -> None: ...

    def send_webhook_delivery(
        self, delivery_id: int, *, countdown: float | None = None
    ) -> None: ...


@dataclass
class CeleryDispatcher:
    """Sends by task name, so the API never imports the worker's task code."""

    celery: Celery

    def send_job(self, job_id: str, queue: str, *, countdown: float | None = None) -> None:
        self.celery.send_task(
            RUN_JOB_TASK,
            args=[job_id],
            queue=str(queue),
            routing_key=str(queue),
            countdown=countdown,
        )

    def send_webhook_delivery(self, delivery_id: int, *, countdown: float | None = None) -> None:
        self.celery.send_task(
            DELIVER_WEBHOOK_TASK,
            args=[delivery_id],
            queue=WEBHOOK_QUEUE.value,
            routing_key=WEBHOOK_QUEUE.value,
            countdown=countdown,
        )


@dataclass
class RecordingDispatcher:
    """Keeps what would have been sent (tests, and tools that run jobs in-process)."""

    jobs: list[tuple[str, str, float | None]]
    deliveries: list[tuple[int, float | None]]

    def __init__(self) -> None:
        self.jobs = []
        self.deliveries = []

    def send_job(self, job_id: str, queue: str, *, countdown: float | None = None) -> None:
        self.jobs.append((job_id, str(queue), countdown))

    def send_webhook_delivery(self, delivery_id: int, *, countdown: float | None = None) -> None:
        self.deliveries.append((delivery_id, countdown))

    @property
    def job_ids(self) -> list[str]:
        return [job_id for job_id, _queue, _countdown in self.jobs]


@functools.lru_cache(maxsize=1)
def default_dispatcher() -> CeleryDispatcher:
    """The process's dispatcher on ``Settings().broker_url`` (when no owner installed one)."""
    return CeleryDispatcher(create_celery_app(get_settings()))


def dispatcher_for(session: Session) -> Dispatcher:
    """The dispatcher the session's owner installed, else the process's, else the default."""
    dispatcher: Dispatcher | None = session.info.get(DISPATCHER_KEY)
    if dispatcher is not None:
        return dispatcher
    from app.context import context_of  # app.context imports this module

    context = context_of(session)
    return context.dispatcher if context is not None else default_dispatcher()


def send_job(job_id: str, queue: str, *, countdown: float | None = None) -> None:
    """Send a job's message now, outside any transaction (the reaper, tools)."""
    default_dispatcher().send_job(job_id, queue, countdown=countdown)


@dataclass(frozen=True)
class _PendingJob:
    job_id: str
    queue: str
    countdown: float | None


@dataclass(frozen=True)
class _PendingDelivery:
    delivery_id: int
    countdown: float | None


def _buffer(session: Session, key: Any, item: object) -> None:
    pending: dict[Any, object] | None = session.info.get(_PENDING_KEY)
    if pending is None:
        pending = session.info[_PENDING_KEY] = {}
        call_after_commit(session, functools.partial(_send_pending, session))
        call_after_rollback(session, functools.partial(session.info.pop, _PENDING_KEY, None))
    pending[key] = item  # the same job enqueued twice in one transaction is sent once


def enqueue_job(session: Session, job: Job, *, countdown: float | None = None) -> None:
    """Send ``job``'s message once the session's transaction commits; dropped on rollback."""
    job.dispatched_at = utcnow()
    _buffer(session, ("job", job.id), _PendingJob(job.id, job.queue.value, countdown))


def enqueue_webhook_delivery(
    session: Session, delivery_id: int, *, countdown: float | None = None
) -> None:
    """Send a webhook delivery's message once the transaction commits; dropped on rollback."""
    _buffer(session, ("delivery", delivery_id), _PendingDelivery(delivery_id, countdown))


def _send_pending(session: Session) -> None:
    pending: dict[Any, object] = session.info.pop(_PENDING_KEY, None) or {}
    dispatcher = dispatcher_for(session)
    undelivered: list[str] = []
    for item in pending.values():
        try:
            if isinstance(item, _PendingJob):
                dispatcher.send_job(item.job_id, item.queue, countdown=item.countdown)
            elif isinstance(item, _PendingDelivery):
                dispatcher.send_webhook_delivery(item.delivery_id, countdown=item.countdown)
        except Exception:  # the broker is down: the rows are committed, the reaper re-sends
            logger.exception("could not send %r; the reaper will send it again", item)
            if isinstance(item, _PendingJob):
                undelivered.append(item.job_id)
    if undelivered:
        _mark_undispatched(session, undelivered)


def _mark_undispatched(session: Session, job_ids: list[str]) -> None:
    """Record that these jobs have no message, so the next reaper pass sends one at once."""
    try:
        session.execute(
            sa.update(Job)
            .where(Job.id.in_(job_ids), Job.status == "QUEUED")
            .values(dispatched_at=None)
            .execution_options(synchronize_session=False)
        )
        session.commit()
    except Exception:
        logger.exception("could not mark jobs %s as not dispatched", job_ids)
        session.rollback()


def broker_instance_id(broker_url: str) -> str | None:
    """Who the broker is: Redis's ``run_id``, new at every server start; None when unknown.

    A broker without persistence forgets its queued messages when it restarts; the reaper uses
    this to notice and send the messages of QUEUED jobs again.
    """
    if not broker_url.startswith(("redis://", "rediss://")):
        return None
    import redis

    client = redis.Redis.from_url(broker_url, socket_connect_timeout=2, socket_timeout=2)
    try:
        return str(client.info("server")["run_id"])
    except (redis.exceptions.RedisError, KeyError):
        return None
    finally:
        client.close()


def broker_probe(celery: Celery) -> Callable[[Any], None]:
    """A readiness probe that connects to the broker (raises when it is unreachable)."""

    def probe(_app: Any) -> None:
        with celery.connection_for_write() as connection:
            connection.ensure_connection(
                max_retries=1,
                interval_start=0,
                interval_step=0.2,
                timeout=BROKER_CONNECT_TIMEOUT_SECONDS,
            )

    return probe
