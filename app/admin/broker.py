"""What the broker says: messages waiting per queue, and (where it can broadcast) live workers.

Queue depth comes from kombu: a passive-free ``queue_declare`` answers the number of ready
messages on every transport we run (Redis: the length of the queue's lists, priorities
included; the SQLAlchemy transport: its visible rows). Messages a worker holds unacknowledged
are not counted: they are running. Workers answer ``celery inspect active`` only on transports
that broadcast (Redis); the registry's job rows tell the rest (``app.admin.service``).

Both are cached for a few seconds so that dashboards and Prometheus scrapes do not hammer the
broker.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from celery import Celery

from app.db import JobQueue
from app.queue import RUN_JOB_TASK

logger = logging.getLogger(__name__)

CACHE_SECONDS = 3.0
INSPECT_TIMEOUT_SECONDS = 0.8


@dataclass(frozen=True)
class QueueDepths:
    depths: dict[str, int | None]
    error: str | None = None


@dataclass(frozen=True)
class BrokerWorker:
    """A worker that answered ``inspect active``: its name and the job ids it runs."""

    name: str
    job_ids: list[str] = field(default_factory=list)


def broker_transport(celery: Celery) -> str:
    url = str(celery.conf.broker_url or "")
    scheme = url.split("://", 1)[0].split("+", 1)[0] or "unknown"
    return {"sqla": "sqlalchemy"}.get(scheme, scheme)


def can_broadcast(celery: Celery) -> bool:
    """Whether ``celery inspect`` can reach workers (the SQLAlchemy transport has no fanout)."""
    return broker_transport(celery) in {"redis", "rediss", "amqp", "amqps", "pyamqp"}


def read_queue_depths(celery: Celery, queues: list[str]) -> QueueDepths:
    """Ready messages per queue; ``None`` for each and the reason when the broker is down."""
    try:
        with celery.connection_for_read() as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, timeout=2.0)
            channel = connection.default_channel
            depths: dict[str, int | None] = {}
            for queue in queues:
                declared = channel.queue_declare(queue=queue, passive=False, durable=True)
                depths[queue] = int(declared.message_count)
            return QueueDepths(depths)
    except Exception as error:  # noqa: BLE001  (the overview shows the broker as down)
        logger.warning("could not read queue depths: %s", error)
        return QueueDepths({queue: None for queue in queues}, f"{type(error).__name__}: {error}")


def inspect_active(celery: Celery) -> list[BrokerWorker] | None:
    """Workers and the jobs they run, from ``celery inspect active``; None when unsupported."""
    if not can_broadcast(celery):
        return None
    try:
        replies = celery.control.inspect(timeout=INSPECT_TIMEOUT_SECONDS).active() or {}
    except Exception as error:  # noqa: BLE001  (no answer: the job rows still tell)
        logger.warning("celery inspect failed: %s", error)
        return None
    workers = []
    for name, tasks in sorted(replies.items()):
        job_ids = [
            str(task["args"][0])
            for task in tasks or []
            if task.get("name") == RUN_JOB_TASK and task.get("args")
        ]
        workers.append(BrokerWorker(name, job_ids))
    return workers


class BrokerStats:
    """Cached queue depths and broadcast worker list of one Celery app (thread-safe)."""

    def __init__(self, celery: Celery, ttl_seconds: float = CACHE_SECONDS) -> None:
        self.celery = celery
        self.ttl = ttl_seconds
        self.queues = [queue.value for queue in JobQueue]
        self._lock = threading.Lock()
        self._depths: tuple[float, QueueDepths] | None = None
        self._workers: tuple[float, list[BrokerWorker] | None] | None = None

    @property
    def transport(self) -> str:
        return broker_transport(self.celery)

    def queue_depths(self) -> QueueDepths:
        with self._lock:
            if self._depths is not None and time.monotonic() - self._depths[0] < self.ttl:
                return self._depths[1]
        depths = read_queue_depths(self.celery, self.queues)
        with self._lock:
            self._depths = (time.monotonic(), depths)
        return depths

    def workers(self) -> list[BrokerWorker] | None:
        with self._lock:
            if self._workers is not None and time.monotonic() - self._workers[0] < self.ttl:
                return self._workers[1]
        workers = inspect_active(self.celery)
        with self._lock:
            self._workers = (time.monotonic(), workers)
        return workers
