"""Rules of jobs as the API sees them: validate and create, list, read, cancel, follow.

A job's parameters are validated and resolved here, when it is created (unknown ids → 404,
bad values → 400/422), and stored normalised: registry ids, the full training configuration,
the derived base versions and task. A worker can then run the job from the row alone, and a
retried run uses exactly the same configuration (so it resumes from its checkpoint).

Queues: ``train``, ``recycle``, ``interpolation`` and ``similarity`` tune or evaluate whole
adapted models several times and go to ``gpu``. ``compatibility`` is two evaluation passes
over one split with no training: it goes to ``cpu``, so a campaign's fan-out of compatibility
checks runs on CPU workers while the GPUs tune (the embedded worker consumes both queues).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy.orm import Session

from app.adapters import service as adapters_service
from app.context import context_of
from app.db import Adapter, AdapterStatus, Job, JobKind, JobQueue, JobStatus, Task, utcnow
from app.db.session import SessionFactory, transaction
from app.errors import BadRequest, Conflict, NotFound
from app.events import record_event
from app.jobs.repository import JobQuery, JobRepository
from app.jobs.schemas import (
    CompatibilityJobParams,
    InterpolationJobParams,
    RecycleJobParams,
    SimilarityJobParams,
    TrainingParams,
    TrainJobParams,
)
from app.models import service as models_service
from app.pagination import Paged, Pagination
from app.queue import enqueue_job
from app.settings import Settings
from app.tasks import service as tasks_service
from recycling_core.adaptation import AdapterOptions
from recycling_core.training import TrainingConfig

logger = logging.getLogger(__name__)

QUEUE_BY_KIND: dict[JobKind, JobQueue] = {
    JobKind.TRAIN: JobQueue.GPU,
    JobKind.RECYCLE: JobQueue.GPU,
    JobKind.INTERPOLATION: JobQueue.GPU,
    JobKind.SIMILARITY: JobQueue.GPU,
    JobKind.COMPATIBILITY: JobQueue.CPU,
}

EVALUATIONS_PER_RUN = 10
"""Default dev evaluations of a run when ``eval_every`` is not given (the convergence curve)."""


@dataclass(frozen=True)
class JobFinished:
    """A job reached SUCCEEDED, FAILED or CANCELLED (recorded in the transaction that ended it)."""

    job_id: str
    kind: JobKind
    status: JobStatus
    campaign_id: str | None
    result_adapter_id: str | None
    result_report_id: str | None
    error_code: str | None
    error_message: str | None

    @classmethod
    def of(cls, job: Job) -> JobFinished:
        return cls(
            job_id=job.id,
            kind=job.kind,
            status=job.status,
            campaign_id=job.campaign_id,
            result_adapter_id=job.result_adapter_id,
            result_report_id=job.result_report_id,
            error_code=job.error_code,
            error_message=job.error_message,
        )


# --------------------------------------------------------------------------- parameters


def training_config(overrides: TrainingParams | dict[str, Any] | None) -> TrainingConfig:
    """A validated TrainingConfig from API overrides (ConfigError → 400)."""
    values = (
        overrides.overrides() if isinstance(overrides, TrainingParams) else dict(overrides or {})
    )
    if "eval_every" not in values:
        steps = int(values.get("steps", TrainingConfig.steps))
        values["eval_every"] = max(1, steps // EVALUATIONS_PER_RUN)
    return TrainingConfig(**values)


def _ready_adapter(session: Session, adapter_id: str, field: str) -> Adapter:
    adapter = adapters_service.get_adapter(session, adapter_id)
    if adapter.status != AdapterStatus.READY:
        raise BadRequest(
            f"{field}: adapter {adapter_id} is {adapter.status}", code="AdapterNotReady"
        )
    if adapter.artifact_uri is None:
        raise BadRequest(
            f"{field}: adapter {adapter_id} has no stored files", code="AdapterNotReady"
        )
    return adapter


def _train_task(session: Session, params: TrainJobParams) -> Task:
    if params.task_id is not None:
        return tasks_service.get_task_by_id(session, params.task_id)
    if params.task is not None:
        return tasks_service.get_task(session, params.task)
    raise BadRequest("name the task: task_id or task")


def train_params(session: Session, params: TrainJobParams) -> dict[str, Any]:
    version = adapters_service.resolve_model_version(
        session, model=params.model, version=params.version, version_id=params.model_version_id
    )
    task = _train_task(session, params)
    options = AdapterOptions(
        **{
            **params.adapter.model_dump(),
            "target_modules": tuple(params.adapter.target_modules)
            if params.adapter.target_modules
            else None,
        }
    )
    return {
        "model_version_id": version.id,
        "task_id": task.id,
        "adapter": _jsonable(dataclasses.asdict(options)),
        "training": dataclasses.asdict(training_config(params.training)),
        "few_shot": params.few_shot,
        "name": params.name,
        "aliases": list(params.aliases),
    }


def _upgrade_pair(session: Session, adapter_id: str, to_version_id: int) -> tuple[Adapter, int]:
    adapter = _ready_adapter(session, adapter_id, "adapter_id")
    target = models_service.get_version_by_id(session, to_version_id, require_ready=True)
    if target.id == adapter.model_version_id:
        raise BadRequest(
            f"adapter {adapter.id} is already on model version id {target.id}", code="SameVersion"
        )
    return adapter, target.id


def compatibility_params(session: Session, params: CompatibilityJobParams) -> dict[str, Any]:
    adapter, to_version_id = _upgrade_pair(session, params.adapter_id, params.to_version_id)
    return {
        "adapter_id": adapter.id,
        "from_version_id": adapter.model_version_id,
        "to_version_id": to_version_id,
        "task_id": adapter.task_id,
        "split": params.split,
        "fresh_score": params.fresh_score,
        "seed": params.seed,
    }


def recycle_params(session: Session, params: RecycleJobParams) -> dict[str, Any]:
    adapter, to_version_id = _upgrade_pair(session, params.adapter_id, params.to_version_id)
    return {
        "adapter_id": adapter.id,
        "from_version_id": adapter.model_version_id,
        "to_version_id": to_version_id,
        "task_id": adapter.task_id,
        "method": params.method,
        "training": dataclasses.asdict(training_config(params.training)),
        "few_shot": params.few_shot,
        "target": params.target,
        "name": params.name,
        "aliases": list(params.aliases),
    }


def _adapter_pair(session: Session, old_id: str, new_id: str) -> tuple[Adapter, Adapter]:
    old = _ready_adapter(session, old_id, "old_adapter_id")
    new = _ready_adapter(session, new_id, "new_adapter_id")
    if old.task_id != new.task_id:
        raise BadRequest(
            f"adapters {old.id} and {new.id} belong to different tasks", code="TaskMismatch"
        )
    return old, new


def interpolation_params(session: Session, params: InterpolationJobParams) -> dict[str, Any]:
    old, new = _adapter_pair(session, params.old_adapter_id, params.new_adapter_id)
    return {
        "old_adapter_id": old.id,
        "new_adapter_id": new.id,
        "task_id": new.task_id,
        "mode": params.mode,
        "points": params.points,
        "split": params.split,
        "seed": params.seed,
    }


def similarity_params(session: Session, params: SimilarityJobParams) -> dict[str, Any]:
    old, new = _adapter_pair(session, params.old_adapter_id, params.new_adapter_id)
    return {
        "old_adapter_id": old.id,
        "new_adapter_id": new.id,
        "task_id": new.task_id,
        "probes": params.probes,
        "seed": params.seed,
    }


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


_NORMALISERS: dict[JobKind, Callable[[Session, Any], dict[str, Any]]] = {
    JobKind.TRAIN: train_params,
    JobKind.COMPATIBILITY: compatibility_params,
    JobKind.RECYCLE: recycle_params,
    JobKind.INTERPOLATION: interpolation_params,
    JobKind.SIMILARITY: similarity_params,
}


# --------------------------------------------------------------------------- create


def add_job(
    session: Session,
    settings: Settings,
    kind: JobKind,
    params: dict[str, Any],
    *,
    max_attempts: int | None = None,
    campaign_id: str | None = None,
    campaign_key: str | None = None,
) -> Job:
    """Insert a QUEUED job with already normalised ``params``; its message goes after commit."""
    job = Job(
        kind=kind,
        queue=QUEUE_BY_KIND[kind],
        status=JobStatus.QUEUED,
        params=params,
        campaign_id=campaign_id,
        campaign_key=campaign_key,
        progress={},
        attempts=0,
        max_attempts=max_attempts or settings.job_max_attempts,
        cost={},
        cancel_requested=False,
        created_at=utcnow(),
    )
    JobRepository(session).add(job)
    enqueue_job(session, job)
    return job


def create_job(
    session: Session,
    settings: Settings,
    kind: JobKind | str,
    params: Any,
    *,
    max_attempts: int | None = None,
) -> Job:
    """Validate a job request against the registry and queue it (202 with the job)."""
    kind = JobKind(kind)
    normalised = _NORMALISERS[kind](session, params)
    return add_job(session, settings, kind, normalised, max_attempts=max_attempts)


# --------------------------------------------------------------------------- read


def get_job(session: Session, job_id: str) -> Job:
    job = JobRepository(session).get(job_id)
    if job is None:
        raise NotFound(f"job {job_id!r} does not exist", code="JobNotFound")
    return job


def list_jobs(session: Session, filters: JobQuery, page: Pagination) -> Paged[Job]:
    """Jobs, newest first, filtered by status, kind and campaign."""
    rows, total = JobRepository(session).page(filters, page)
    return Paged(rows, total, page)


# --------------------------------------------------------------------------- cancel


def cancel_job(session: Session, job_id: str) -> Job:
    """QUEUED → CANCELLED at once; RUNNING → cancel requested (the worker stops); else 409."""
    repository = JobRepository(session)
    job = get_job(session, job_id)
    now = utcnow()
    if job.status == JobStatus.QUEUED and repository.finish_queued(
        job_id,
        {
            "status": JobStatus.CANCELLED,
            "cancel_requested": True,
            "finished_at": now,
            "error_code": "Cancelled",
            "error_message": "cancelled before it started",
        },
    ):
        cancelled = repository.get_fresh(job_id)
        assert cancelled is not None
        record_event(session, JobFinished.of(cancelled))
        return cancelled
    if repository.request_cancel(job_id):
        stopping = repository.get_fresh(job_id)
        assert stopping is not None
        return stopping
    finished = repository.get_fresh(job_id)
    assert finished is not None
    raise Conflict(
        f"job {job_id} is {finished.status}; only QUEUED or RUNNING jobs can be cancelled",
        code="JobFinished",
    )


# --------------------------------------------------------------------------- retry


@dataclass(frozen=True)
class JobRetried:
    """A FAILED or CANCELLED job was queued again by hand (its campaign, if any, reopens)."""

    job_id: str
    kind: JobKind
    campaign_id: str | None
    previous_status: JobStatus
    previous_error: str | None


def retry_job(session: Session, settings: Settings, job_id: str) -> Job:
    """FAILED or CANCELLED → QUEUED: a new attempt of the same job (same id, same parameters).

    The job keeps its id, so a campaign finds it under its key and takes it into account when
    it ends; it gets a fresh budget of ``settings.job_max_attempts`` runs, its error is cleared
    (and logged) and its message is sent after commit. Any other state: 409.
    """
    repository = JobRepository(session)
    job = get_job(session, job_id)
    if job.status not in (JobStatus.FAILED, JobStatus.CANCELLED):
        raise Conflict(
            f"job {job_id} is {job.status}; only FAILED or CANCELLED jobs can be retried",
            code="JobNotRetryable",
        )
    previous_status = job.status
    previous_error = f"{job.error_code}: {job.error_message}" if job.error_code else None
    retried_from = {
        "status": previous_status.value,
        "error_code": job.error_code,
        "error_message": job.error_message,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "attempts": job.attempts,
    }
    if not repository.requeue_finished(
        job_id,
        {
            "status": JobStatus.QUEUED,
            "worker": None,
            "cancel_requested": False,
            "started_at": None,
            "finished_at": None,
            "heartbeat_at": None,
            "error_code": None,
            "error_message": None,
            "progress": {"retried_from": retried_from},
            "max_attempts": job.attempts + settings.job_max_attempts,
        },
    ):
        raise Conflict(f"job {job_id} changed state meanwhile; retry again", code="JobNotRetryable")
    retried = repository.get_fresh(job_id)
    assert retried is not None
    enqueue_job(session, retried)
    logger.info(
        "job %s: retried by hand after %s (%s)", job_id, previous_status, previous_error or "-"
    )
    record_event(
        session,
        JobRetried(job_id, retried.kind, retried.campaign_id, previous_status, previous_error),
    )
    return retried


# --------------------------------------------------------------------------- follow (SSE)

SSE_KEEPALIVE_SECONDS = 15.0


def job_snapshot(session: Session, job_id: str) -> dict[str, Any] | None:
    """What the event stream sends: status, attempts, progress, result and error of a job."""
    job = JobRepository(session).get(job_id)
    if job is None:
        return None
    return {
        "id": job.id,
        "kind": job.kind.value,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "cancel_requested": job.cancel_requested,
        "progress": job.progress or {},
        "worker": job.worker,
        "error_code": job.error_code,
        "error_message": job.error_message,
        "result_adapter_id": job.result_adapter_id,
        "result_report_id": job.result_report_id,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def sse_event(event: str, data: dict[str, Any], event_id: int) -> bytes:
    payload = json.dumps(data, separators=(",", ":"))
    return f"id: {event_id}\nevent: {event}\ndata: {payload}\n\n".encode()


def follow_job(
    session: Session, job_id: str, *, poll_seconds: float, fallback_factory: SessionFactory
) -> AsyncIterator[bytes]:
    """The event stream of an existing job (NotFound first), read through the session's owner."""
    get_job(session, job_id)
    context = context_of(session)
    factory = context.session_factory if context is not None else fallback_factory
    return job_events(factory, job_id, poll_seconds=poll_seconds)


async def job_events(
    session_factory: SessionFactory,
    job_id: str,
    *,
    poll_seconds: float,
    keepalive_seconds: float = SSE_KEEPALIVE_SECONDS,
) -> AsyncIterator[bytes]:
    """Server-sent events of a job: ``progress`` on every change, then one final ``status``.

    Reads the job row in a short transaction per poll (never holds one open while waiting).
    """

    def read() -> dict[str, Any] | None:
        with transaction(session_factory) as session:
            return job_snapshot(session, job_id)

    event_id = 0
    last: tuple[Any, ...] | None = None
    last_sent = time.monotonic()
    while True:
        snapshot = await anyio.to_thread.run_sync(read)
        if snapshot is None:
            event_id += 1
            yield sse_event(
                "error", {"error": "JobNotFound", "detail": f"job {job_id} is gone"}, event_id
            )
            return
        key = (
            snapshot["status"],
            snapshot["attempts"],
            snapshot["cancel_requested"],
            snapshot["progress"].get("updated_at"),
            snapshot["progress"].get("step"),
        )
        if JobStatus(snapshot["status"]).is_terminal:
            event_id += 1
            yield sse_event("status", snapshot, event_id)
            return
        if key != last:
            last = key
            event_id += 1
            last_sent = time.monotonic()
            yield sse_event("progress", snapshot, event_id)
        elif time.monotonic() - last_sent >= keepalive_seconds:
            last_sent = time.monotonic()
            yield b": keep-alive\n\n"
        await anyio.sleep(poll_seconds)
