"""The workers' Celery app: ``celery -A workers.celery_app worker -Q gpu,cpu``.

One worker process per GPU (pin it with ``CUDA_VISIBLE_DEVICES``), each running one job at a
time: ``--pool threads --concurrency 1``. The threads pool keeps the worker's main thread free
while a long training job runs, so it keeps answering ``celery inspect`` / Flower and broker
heartbeats (the solo pool goes silent for the whole job), and nothing is forked after torch
and CUDA are initialised (prefork would). One job per process keeps GPU memory predictable;
``worker_prefetch_multiplier=1`` with late acks means a worker holds no message it is not
running, so other workers take the rest of the queue.

    celery -A workers.celery_app worker -Q gpu,cpu --pool threads --concurrency 1 -l info
"""

from __future__ import annotations

from typing import Any

from celery import signals

from app.observability.logs import configure_logging
from app.queue import create_celery_app
from app.settings import get_settings

celery_app = create_celery_app()


@signals.setup_logging.connect
def _structured_logs(**_: Any) -> None:
    """The worker logs like the API: JSON lines (or text), with the job id of the running job."""
    settings = get_settings()
    configure_logging(settings.log_format, settings.log_level)

app = celery_app  # ``celery -A workers.celery_app`` finds either name

import workers.tasks  # noqa: E402,F401  (registers recycle.run_job and recycle.deliver_webhook)

WORKER_ARGV = ["worker", "-Q", "gpu,cpu", "--pool", "threads", "--concurrency", "1", "-l", "info"]
"""What ``recycle serve`` starts for its embedded worker (``celery -A workers.celery_app …``)."""
