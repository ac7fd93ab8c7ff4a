"""Running one job on a worker: claim it, fetch its inputs, call recycling_core, record the outcome.

The Celery task (``workers.tasks.run_job``) is a thin wrapper around :func:`execute_job`.

* **Claim.** One compare-and-set ``UPDATE`` turns the job RUNNING for this worker
  (``hostname:pid``) and counts the attempt. A SUCCEEDED/FAILED/CANCELLED job, or one RUNNING
  with a fresh heartbeat on another worker, is left alone: running a message twice is a no-op.
* **Inputs.** Model versions, adapters and task splits are fetched from the artifact store into
  ``<data_dir>/cache/<kind>/<fingerprint>`` (every file checked against its sha256) and reused
  by later jobs with the same fingerprint.
* **Run.** Progress goes to ``jobs.progress`` at most every ``progress_throttle_seconds``, each
  write in its own short transaction that also refreshes the heartbeat; a thread keeps the
  heartbeat fresh between progress writes. ``should_cancel`` polls ``cancel_requested`` (and
  notices a job taken over by the reaper). Checkpoints go to
  ``<data_dir>/checkpoints/<job_id>``, so a retried or redelivered job resumes. Base models
  stay in a per-process :class:`~recycling_core.models.BaseModelCache`.
* **Outcome.** Success is ONE transaction: the adapter's files are stored (atomically) and its
  READY row added with its lineage, the report stored, the job SUCCEEDED with its cost and
  result ids. If that transaction fails, the rollback hook deletes the stored files, so no
  half-written adapter is ever visible. RecyclingError and other deliberate errors → FAILED
  (no retry); JobCancelled → CANCELLED; declared transient errors → QUEUED again with
  exponential backoff until ``max_attempts`` runs were made, then FAILED.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kombu.exceptions
import redis.exceptions
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from app.adapters import service as adapters_service
from app.adapters.repository import AdapterRepository
from app.db import Adapter, JobKind, JobStatus, utcnow
from app.db.session import SessionFactory, transaction
from app.errors import AppError
from app.events import record_event
from app.jobs.repository import JobRepository
from app.jobs.service import JobFinished
from app.models import service as models_service
from app.queue import backoff_delay, enqueue_job
from app.reports import service as reports_service
from app.settings import Settings
from app.storage import ArtifactStore
from app.tasks import service as tasks_service
from recycling_core.adaptation import AdapterOptions
from recycling_core.errors import JobCancelled, RecyclingError
from recycling_core.files import manifest_digest
from recycling_core.models import BaseModelCache
from recycling_core.pipeline import (
    CompatibilityRequest,
    InterpolationRequest,
    RecycleRequest,
    SimilarityRequest,
    TrainRequest,
    attention_similarity,
    compatibility_report,
    interpolate,
    recycle_adapter,
    recycle_adapters,
    train_adapter,
)
from recycling_core.reports import Report as ReportDocument
from recycling_core.training import Progress, RunHooks, TrainingConfig

logger = logging.getLogger(__name__)

MAX_EVAL_POINTS = 500
"""Dev evaluations kept in ``progress.eval_points`` (the live convergence curve)."""


class TransientArtifactError(OSError):
    """The artifact store could not be read or written (network, disk): worth retrying."""


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    TransientArtifactError,
)
"""The only errors a job is retried for: the database, the broker or the artifact store."""


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerContext:
    """What one worker process keeps between jobs."""

    settings: Settings
    session_factory: SessionFactory
    store: ArtifactStore
    model_cache: BaseModelCache
    worker: str = field(default_factory=worker_identity)
    active: set[str] = field(default_factory=set)
    """Jobs this process is running now (a redelivered message for one of them is a no-op)."""

    @property
    def cache_root(self) -> Path:
        return self.settings.data_dir / "cache"

    def checkpoint_dir(self, job_id: str) -> Path:
        return self.settings.data_dir / "checkpoints" / job_id

    def work_dir(self, job_id: str) -> Path:
        return self.settings.data_dir / "work" / job_id


def _accelerator() -> str | None:
    """A GPU worker keeps its cached base models on the GPU (see BaseModelCache.device)."""
    import torch

    return "cuda" if torch.cuda.is_available() else None


def create_worker_context(
    settings: Settings, session_factory: SessionFactory, store: ArtifactStore | None = None
) -> WorkerContext:
    return WorkerContext(
        settings=settings,
        session_factory=session_factory,
        store=store or ArtifactStore(settings.artifact_root),
        model_cache=BaseModelCache(max_items=settings.base_model_cache_size, device=_accelerator()),
    )


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class StoredInput:
    """A registry artifact a job reads: where it is stored and what it must hash to."""

    category: str  # models | adapters | tasks
    uri: str
    manifest: dict[str, str]
    fingerprint: str


@dataclass(frozen=True)
class JobSpec:
    """A snapshot of the job row and its inputs, read in one short transaction."""

    job_id: str
    kind: JobKind
    params: dict[str, Any]
    attempt: int
    max_attempts: int
    campaign_id: str | None
    inputs: dict[str, StoredInput]


def _stored(
    category: str, uri: str | None, manifest: dict[str, str], fingerprint: str | None
) -> StoredInput:
    if uri is None:
        raise AppError(f"a {category[:-1]} input has no stored files", code="InputNotReady")
    return StoredInput(category, uri, dict(manifest), fingerprint or manifest_digest(manifest))


def _adapter_input(session: Session, adapter_id: str) -> tuple[StoredInput, Adapter]:
    adapter = adapters_service.get_adapter(session, adapter_id)
    return _stored("adapters", adapter.artifact_uri, adapter.manifest, adapter.fingerprint), adapter


def _version_input(session: Session, version_id: int) -> StoredInput:
    version = models_service.get_version_by_id(session, version_id, require_ready=True)
    return _stored("models", version.artifact_uri, version.manifest, version.fingerprint)


def _task_input(session: Session, task_id: int) -> StoredInput:
    task = tasks_service.get_task_by_id(session, task_id)
    return _stored("tasks", task.artifact_uri, task.manifest, task.fingerprint)


def load_spec(session: Session, job_id: str) -> JobSpec:
    """Read the job and resolve every registry id it names (NotFound when one is gone)."""
    job = JobRepository(session).get_fresh(job_id)
    if job is None:
        raise AppError(f"job {job_id} does not exist", code="JobNotFound")
    params = dict(job.params)
    inputs: dict[str, StoredInput] = {}
    if job.kind == JobKind.TRAIN:
        inputs["base"] = _version_input(session, params["model_version_id"])
        inputs["task"] = _task_input(session, params["task_id"])
    elif job.kind in (JobKind.COMPATIBILITY, JobKind.RECYCLE):
        inputs["adapter"], adapter = _adapter_input(session, params["adapter_id"])
        inputs["old_base"] = _version_input(session, adapter.model_version_id)
        inputs["new_base"] = _version_input(session, params["to_version_id"])
        inputs["task"] = _task_input(session, adapter.task_id)
    else:
        inputs["old_adapter"], old = _adapter_input(session, params["old_adapter_id"])
        inputs["new_adapter"], new = _adapter_input(session, params["new_adapter_id"])
        inputs["old_base"] = _version_input(session, old.model_version_id)
        inputs["new_base"] = _version_input(session, new.model_version_id)
        inputs["task"] = _task_input(session, new.task_id)
    return JobSpec(
        job.id, job.kind, params, job.attempts, job.max_attempts, job.campaign_id, inputs
    )


def materialize(store: ArtifactStore, cache_root: Path, item: StoredInput) -> Path:
    """A verified local copy of a stored directory, shared by every job that reads it."""
    target = cache_root / item.category / item.fingerprint
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{item.fingerprint}.fetch-{uuid.uuid4().hex}")
    try:
        store.fetch_directory(item.uri, staging, item.manifest)
    except AppError:
        raise  # missing or corrupted: retrying would not help
    except OSError as error:
        raise TransientArtifactError(f"could not fetch {item.uri}: {error}") from error
    try:
        os.rename(staging, target)
    except OSError:
        if not target.is_dir():  # not a concurrent fetch of the same files: a real failure
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- the run


def _adapter_options(values: dict[str, Any]) -> AdapterOptions:
    targets = values.get("target_modules")
    return AdapterOptions(**{**values, "target_modules": tuple(targets) if targets else None})


def recycle_request(spec: JobSpec, paths: dict[str, Path], out_dir: Path) -> RecycleRequest:
    p = spec.params
    return RecycleRequest(
        method=p["method"],
        adapter_dir=paths["adapter"],
        old_base_dir=paths["old_base"],
        new_base_dir=paths["new_base"],
        task_dir=paths["task"],
        out_dir=out_dir,
        training=TrainingConfig(**p["training"]),
        few_shot=p.get("few_shot"),
        target=p.get("target"),
        job_id=spec.job_id,
    )


def run_core(
    spec: JobSpec, paths: dict[str, Path], out_dir: Path, hooks: RunHooks
) -> ReportDocument:
    """Build the recycling_core request of the job's kind and run it."""
    p = spec.params
    if spec.kind == JobKind.TRAIN:
        return train_adapter(
            TrainRequest(
                base_dir=paths["base"],
                task_dir=paths["task"],
                out_dir=out_dir,
                adapter=_adapter_options(p["adapter"]),
                training=TrainingConfig(**p["training"]),
                few_shot=p.get("few_shot"),
                job_id=spec.job_id,
            ),
            hooks,
        )
    if spec.kind == JobKind.COMPATIBILITY:
        return compatibility_report(
            CompatibilityRequest(
                adapter_dir=paths["adapter"],
                old_base_dir=paths["old_base"],
                new_base_dir=paths["new_base"],
                task_dir=paths["task"],
                split=p.get("split", "test"),
                fresh_score=p.get("fresh_score"),
                seed=p.get("seed", 0),
                job_id=spec.job_id,
            ),
            hooks,
        )
    if spec.kind == JobKind.RECYCLE:
        return recycle_adapter(recycle_request(spec, paths, out_dir), hooks)
    if spec.kind == JobKind.INTERPOLATION:
        return interpolate(
            InterpolationRequest(
                mode=p.get("mode", "model"),
                old_base_dir=paths["old_base"],
                old_adapter_dir=paths["old_adapter"],
                new_base_dir=paths["new_base"],
                new_adapter_dir=paths["new_adapter"],
                task_dir=paths["task"],
                points=p.get("points", 11),
                split=p.get("split", "test"),
                seed=p.get("seed", 0),
                job_id=spec.job_id,
            ),
            hooks,
        )
    return attention_similarity(
        SimilarityRequest(
            old_base_dir=paths["old_base"],
            old_adapter_dir=paths["old_adapter"],
            new_base_dir=paths["new_base"],
            new_adapter_dir=paths["new_adapter"],
            task_dir=paths["task"],
            probes=p.get("probes", 32),
            seed=p.get("seed", 0),
            job_id=spec.job_id,
        ),
        hooks,
    )


class JobMonitor:
    """The hooks of one run: throttled progress, heartbeats, cooperative cancel.

    Every database write is best effort (a progress row that could not be written must not
    fail a training run); it also tells whether this worker still owns the job. A job that
    was taken away (reaped as lost, then claimed elsewhere) makes ``should_cancel`` true and
    ``claim_lost`` set, and the run is abandoned without writing anything.
    """

    def __init__(self, context: WorkerContext, job_id: str) -> None:
        self.context = context
        self.job_id = job_id
        self.settings = context.settings
        self.claim_lost = False
        self.cancel_requested = False
        self._eval_points: list[dict[str, float]] = []
        self._resumed_from: int | None = None
        self._seen_training = False
        self._last_write = float("-inf")
        self._last_poll = float("-inf")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._beat, name=f"heartbeat-{job_id[:8]}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def hooks(self, checkpoint_dir: Path | None) -> RunHooks:
        return RunHooks(
            progress=self.progress,
            should_cancel=self.should_cancel,
            checkpoint_dir=checkpoint_dir,
            cache=self.context.model_cache,
            compile_model=self.settings.compile_training,
        )

    def _write(self, progress: dict[str, Any] | None) -> None:
        try:
            with transaction(self.context.session_factory) as session:
                owned = JobRepository(session).heartbeat(
                    self.job_id, self.context.worker, utcnow(), progress
                )
            if not owned:
                self.claim_lost = True
        except Exception as error:  # the next write will try again
            logger.warning("job %s: could not write progress/heartbeat: %s", self.job_id, error)

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_seconds):
            with self._lock:
                self._write(None)

    def progress(self, update: Progress) -> None:
        if update.phase == "train" and not self._seen_training:
            # A run that starts past step 0 resumed from a checkpoint of an earlier attempt.
            self._seen_training = True
            self._resumed_from = update.step - 1 if update.step > 1 else None
        if "dev_metric" in update.metrics:
            self._eval_points.append({"step": update.step, "metric": update.metrics["dev_metric"]})
            del self._eval_points[:-MAX_EVAL_POINTS]
        now = time.monotonic()
        final = update.total > 0 and update.step >= update.total
        if not final and now - self._last_write < self.settings.progress_throttle_seconds:
            return
        self._last_write = now
        document = {
            "phase": update.phase,
            "step": update.step,
            "total": update.total,
            "metrics": {k: float(v) for k, v in update.metrics.items()},
            "eta_seconds": update.eta_seconds,
            "eval_points": list(self._eval_points),
            "updated_at": utcnow().isoformat(),
        }
        if self._resumed_from is not None:
            document["resumed_from_step"] = self._resumed_from
        with self._lock:
            self._write(document)

    def should_cancel(self) -> bool:
        if self.claim_lost or self.cancel_requested:
            return True
        now = time.monotonic()
        if now - self._last_poll < max(self.settings.progress_throttle_seconds, 0.2):
            return False
        self._last_poll = now
        try:
            with transaction(self.context.session_factory) as session:
                control = JobRepository(session).control(self.job_id)
        except Exception as error:
            logger.warning("job %s: could not poll for cancel: %s", self.job_id, error)
            return False
        if (
            control is None
            or control.status != JobStatus.RUNNING
            or control.worker != self.context.worker
        ):
            self.claim_lost = True
        elif control.cancel_requested:
            self.cancel_requested = True
        return self.claim_lost or self.cancel_requested


# --------------------------------------------------------------------------- outcomes


class ClaimLost(Exception):
    """The job no longer belongs to this worker (reaped, or claimed by another one)."""


def _error_values(status: JobStatus, code: str | None, message: str | None) -> dict[str, Any]:
    return {
        "status": status,
        "finished_at": utcnow(),
        "error_code": code,
        "error_message": (message or "")[:10_000] or None,
    }


def end_owned_job(
    context: WorkerContext, job_id: str, status: JobStatus, code: str | None, message: str | None
) -> bool:
    """RUNNING (this worker) → FAILED/CANCELLED with the reason; False when no longer ours."""
    with transaction(context.session_factory) as session:
        repository = JobRepository(session)
        if not repository.finish_owned(
            job_id, context.worker, _error_values(status, code, message)
        ):
            return False
        job = repository.get_fresh(job_id)
        assert job is not None
        record_event(session, JobFinished.of(job))
    return True


def schedule_retry(context: WorkerContext, job_id: str, error: BaseException) -> str:
    """After a transient error: QUEUED again with backoff, or FAILED once attempts are used up."""
    settings = context.settings
    reason = f"{type(error).__name__}: {error}"
    with transaction(context.session_factory) as session:
        repository = JobRepository(session)
        job = repository.lock(job_id)
        if job is None or job.status != JobStatus.RUNNING or job.worker != context.worker:
            return "abandoned"
        if job.attempts >= job.max_attempts:
            repository.finish_owned(
                job_id,
                context.worker,
                _error_values(
                    JobStatus.FAILED,
                    "RetriesExhausted",
                    f"gave up after {job.attempts} attempts; last error: {reason}",
                ),
            )
            job = repository.get_fresh(job_id)
            assert job is not None
            record_event(session, JobFinished.of(job))
            return "failed"
        delay = backoff_delay(
            job.attempts, settings.job_retry_backoff_seconds, settings.job_retry_backoff_max_seconds
        )
        repository.finish_owned(
            job_id,
            context.worker,
            {
                "status": JobStatus.QUEUED,
                "worker": None,
                "error_code": "TransientError",
                "error_message": f"attempt {job.attempts} of {job.max_attempts} failed ({reason}); "
                f"retrying in {delay:.0f}s",
            },
        )
        job = repository.get_fresh(job_id)
        assert job is not None
        enqueue_job(session, job, countdown=delay)
    return "retry"


def _produced_adapter_id(job_id: str) -> str:
    """The id of the adapter a job produces: the same for every attempt of the job."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"recycle:job:{job_id}:adapter"))


def _adapter_metrics(report: ReportDocument) -> dict[str, Any]:
    metrics = report.metrics.model_dump(mode="json", exclude_none=True)
    return {"report_id": report.report_id, "method": report.method, **metrics}


def _register_output(
    session: Session, context: WorkerContext, spec: JobSpec, report: ReportDocument, out_dir: Path
) -> Adapter | None:
    if spec.kind not in (JobKind.TRAIN, JobKind.RECYCLE):
        return None
    p = spec.params
    if spec.kind == JobKind.TRAIN:
        version = models_service.get_version_by_id(
            session, p["model_version_id"], require_ready=True
        )
        task = tasks_service.get_task_by_id(session, p["task_id"])
        recycled_from, method = None, "train"
    else:
        version = models_service.get_version_by_id(session, p["to_version_id"], require_ready=True)
        recycled_from = adapters_service.get_adapter(session, p["adapter_id"])
        task = recycled_from.task
        method = p["method"]
    adapter_id = _produced_adapter_id(spec.job_id)
    if AdapterRepository(session).get(adapter_id, include_deleted=True) is not None:
        raise AppError(f"adapter {adapter_id} of job {spec.job_id} already exists", code="Conflict")
    leftover = context.store.uri_for(f"adapters/{adapter_id}")
    try:
        if context.store.exists(leftover):  # files of an attempt killed before its commit
            context.store.delete(leftover)
        return adapters_service.register_adapter_from_directory(
            session,
            context.store,
            directory=out_dir,
            model_version=version,
            task=task,
            name=p.get("name") or f"{task.name}-{method}",
            metrics=_adapter_metrics(report),
            recycled_from=recycled_from,
            method=method,
            job_id=spec.job_id,
            aliases=p.get("aliases") or (),
            check_compat=False,  # recycling_core checked it against this base while running
            move=True,
            adapter_id=adapter_id,
        )
    except (AppError, RecyclingError):
        raise
    except OSError as error:
        raise TransientArtifactError(f"could not store the adapter: {error}") from error


def record_success(
    context: WorkerContext, spec: JobSpec, report: ReportDocument, out_dir: Path
) -> None:
    """ONE transaction: adapter files + READY row with lineage, report row, job SUCCEEDED."""
    with transaction(context.session_factory) as session:
        repository = JobRepository(session)
        # First statement a write: on SQLite it takes the write lock before anything is read.
        if not repository.heartbeat(spec.job_id, context.worker, utcnow()):
            raise ClaimLost(spec.job_id)
        report = report.model_copy(update={"inputs": _report_inputs(spec)})
        adapter = _register_output(session, context, spec, report, out_dir)
        stored_report = reports_service.store_report(session, report, job_id=spec.job_id)
        values = {
            "status": JobStatus.SUCCEEDED,
            "finished_at": utcnow(),
            "cost": report.cost.model_dump(mode="json"),
            "result_adapter_id": adapter.id if adapter is not None else None,
            "result_report_id": stored_report.id,
            "error_code": None,
            "error_message": None,
        }
        if not repository.finish_owned(spec.job_id, context.worker, values):
            raise ClaimLost(spec.job_id)
        job = repository.get_fresh(spec.job_id)
        assert job is not None
        record_event(session, JobFinished.of(job))


def _report_inputs(spec: JobSpec) -> dict[str, str]:
    keys = (
        "model_version_id",
        "task_id",
        "adapter_id",
        "from_version_id",
        "to_version_id",
        "old_adapter_id",
        "new_adapter_id",
    )
    return {key: str(spec.params[key]) for key in keys if spec.params.get(key) is not None}


# --------------------------------------------------------------------------- claim


@dataclass(frozen=True)
class Claim:
    claimed: bool
    reason: str


def claim_job(context: WorkerContext, job_id: str) -> Claim:
    """Take the job for this worker, or say why this message has nothing to do."""
    if job_id in context.active:
        return Claim(False, "already running in this process")
    now = utcnow()
    stale_before = now - _seconds(context.settings.worker_lost_seconds)
    with transaction(context.session_factory) as session:
        repository = JobRepository(session)
        if repository.claim(job_id, context.worker, now, stale_before=stale_before):
            return Claim(True, "claimed")
        job = repository.get_fresh(job_id)
        if job is None:
            return Claim(False, "no such job")
        if job.status.is_terminal:
            return Claim(False, f"already {job.status}")
        if job.cancel_requested:
            values = _error_values(
                JobStatus.CANCELLED, "Cancelled", "cancelled before it ran again"
            )
            ended = (
                repository.finish_queued(job_id, values)
                if job.status == JobStatus.QUEUED
                else repository.finish_stale(job_id, stale_before, values)
            )
            if ended:
                record_event(session, JobFinished.of(_fresh(repository, job_id)))
                return Claim(False, "cancelled")
        elif job.attempts >= job.max_attempts:
            message = (
                f"worker {job.worker} was lost after {job.attempts} of {job.max_attempts} attempts"
                if job.status == JobStatus.RUNNING
                else f"no attempts left ({job.attempts} of {job.max_attempts})"
            )
            values = _error_values(JobStatus.FAILED, "WorkerLost", message)
            ended = (
                repository.finish_queued(job_id, values)
                if job.status == JobStatus.QUEUED
                else repository.finish_stale(job_id, stale_before, values)
            )
            if ended:
                record_event(session, JobFinished.of(_fresh(repository, job_id)))
                return Claim(False, "failed: attempts exhausted")
        return Claim(False, f"RUNNING on {job.worker} (heartbeat {job.heartbeat_at})")


def _fresh(repository: JobRepository, job_id: str) -> Any:
    job = repository.get_fresh(job_id)
    assert job is not None
    return job


def _seconds(value: float) -> dt.timedelta:
    return dt.timedelta(seconds=value)


# --------------------------------------------------------------------------- the whole job


def execute_job(context: WorkerContext, job_id: str) -> str:
    """Run one job to an outcome; returns what happened (for the worker's log).

    A training recycle job takes along other QUEUED recycle jobs to the same model version with
    the same training settings (up to ``batch_max_adapters``) and trains them all in one batched
    pass on the shared base; each still ends with its own outcome.

    Raises a transient error only when even recording the outcome failed (the database is
    down); the Celery task then retries the message through the broker.
    """
    claim = claim_job(context, job_id)
    if not claim.claimed:
        logger.info("job %s: nothing to do (%s)", job_id, claim.reason)
        return f"skipped: {claim.reason}"
    companions = claim_companions(context, job_id)
    if companions:
        return execute_batch(context, [job_id, *companions])[job_id]
    context.active.add(job_id)
    monitor = JobMonitor(context, job_id)
    work_dir = context.work_dir(job_id)
    terminal = False  # checkpoints are kept unless the job reached its end
    try:
        monitor.start()
        try:
            spec, paths = _prepare_inputs(context, job_id, work_dir)
            out_dir = work_dir / "adapter"
            hooks = monitor.hooks(context.checkpoint_dir(job_id))
            report = run_core(spec, paths, out_dir, hooks)
            monitor.stop()
            record_success(context, spec, report, out_dir)
            terminal = True
            logger.info("job %s: SUCCEEDED", job_id)
            return "succeeded"
        except Exception as error:
            outcome, terminal = conclude_error(context, job_id, error, monitor)
            return outcome
    finally:
        monitor.stop()
        _clean_up(context, job_id, work_dir, terminal)


def _prepare_inputs(context: WorkerContext, job_id: str, work_dir: Path) -> tuple[JobSpec, dict[str, Path]]:
    with transaction(context.session_factory) as session:
        spec = load_spec(session, job_id)
    logger.info(
        "job %s: %s attempt %d of %d on %s", job_id, spec.kind, spec.attempt, spec.max_attempts, context.worker
    )
    paths = {role: materialize(context.store, context.cache_root, item) for role, item in spec.inputs.items()}
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    return spec, paths


def _clean_up(context: WorkerContext, job_id: str, work_dir: Path, terminal: bool) -> None:
    context.active.discard(job_id)
    shutil.rmtree(work_dir, ignore_errors=True)
    if terminal:
        shutil.rmtree(context.checkpoint_dir(job_id), ignore_errors=True)


def conclude_error(
    context: WorkerContext, job_id: str, error: BaseException, monitor: JobMonitor
) -> tuple[str, bool]:
    """Record what an error means for a job: (outcome for the log, whether the job ended)."""
    if isinstance(error, ClaimLost):
        logger.warning("job %s: taken over by another worker; result dropped", job_id)
        return "abandoned", False
    if isinstance(error, JobCancelled):
        monitor.stop()
        if monitor.claim_lost:
            logger.warning("job %s: taken over by another worker; run abandoned", job_id)
            return "abandoned", False
        end_owned_job(context, job_id, JobStatus.CANCELLED, "Cancelled", "cancelled while running")
        return "cancelled", True
    if isinstance(error, RecyclingError):
        return _fail(context, job_id, error.code, error.message, monitor), True
    if isinstance(error, AppError):
        return _fail(context, job_id, error.code, error.detail, monitor), True
    if isinstance(error, TRANSIENT_ERRORS):
        monitor.stop()
        logger.warning("job %s: transient error: %s", job_id, error)
        outcome = schedule_retry(context, job_id, error)
        return outcome, outcome == "failed"
    logger.error("job %s: unexpected error", job_id, exc_info=error)
    return _fail(context, job_id, "InternalError", f"{type(error).__name__}: {error}", monitor), True


# --------------------------------------------------------------------------- batched recycling


def _trains(params: dict[str, Any]) -> bool:
    return params.get("method") not in (None, "direct")


def claim_companions(context: WorkerContext, job_id: str) -> list[str]:
    """Claim QUEUED recycle jobs that can share this (claimed) job's batched training pass.

    Companions go to the same model version with the same training settings and train (not
    ``direct``); a job that left checkpoints of an earlier attempt resumes on its own instead.
    Each is taken with the same compare-and-set claim as a job of its own message, so its
    message later finds it RUNNING or finished and does nothing.
    """
    limit = context.settings.batch_max_adapters - 1
    if limit < 1:
        return []
    now = utcnow()
    stale_before = now - _seconds(context.settings.worker_lost_seconds)
    claimed: list[str] = []
    with transaction(context.session_factory) as session:
        repository = JobRepository(session)
        lead = repository.get_fresh(job_id)
        if lead is None or lead.kind != JobKind.RECYCLE or not _trains(lead.params):
            return []
        if context.checkpoint_dir(job_id).exists():
            return []
        for job in repository.queued_of_kind(JobKind.RECYCLE, exclude=job_id, limit=limit * 8):
            if len(claimed) == limit:
                break
            params = job.params
            if (
                not _trains(params)
                or params.get("to_version_id") != lead.params.get("to_version_id")
                or params.get("training") != lead.params.get("training")
                or context.checkpoint_dir(job.id).exists()
                or job.id in context.active
            ):
                continue
            if repository.claim(job.id, context.worker, now, stale_before=stale_before):
                claimed.append(job.id)
    if claimed:
        logger.info("job %s: training together with %s", job_id, ", ".join(claimed))
    return claimed


def execute_batch(context: WorkerContext, job_ids: list[str]) -> dict[str, str]:
    """Run claimed recycle jobs with one batched training pass; each gets its own outcome."""
    monitors = {job_id: JobMonitor(context, job_id) for job_id in job_ids}
    outcomes: dict[str, str] = {}
    terminal: dict[str, bool] = dict.fromkeys(job_ids, False)
    ready: list[tuple[JobSpec, Path, RunHooks]] = []
    requests: list[RecycleRequest] = []
    try:
        for job_id in job_ids:
            context.active.add(job_id)
            monitors[job_id].start()
            work_dir = context.work_dir(job_id)
            try:
                spec, paths = _prepare_inputs(context, job_id, work_dir)
            except Exception as error:
                outcomes[job_id], terminal[job_id] = conclude_error(context, job_id, error, monitors[job_id])
                continue
            out_dir = work_dir / "adapter"
            hooks = monitors[job_id].hooks(context.checkpoint_dir(job_id))
            ready.append((spec, out_dir, hooks))
            requests.append(recycle_request(spec, paths, out_dir))
        try:
            results: list[Any] = recycle_adapters(requests, [hooks for _, _, hooks in ready])
        except Exception as error:  # the shared pass itself failed: every job shares the error
            results = [error] * len(requests)
        for (spec, out_dir, _), result in zip(ready, results):
            job_id = spec.job_id
            monitor = monitors[job_id]
            try:
                if isinstance(result, BaseException):
                    raise result
                monitor.stop()
                record_success(context, spec, result, out_dir)
                outcomes[job_id], terminal[job_id] = "succeeded", True
                logger.info("job %s: SUCCEEDED (batched with %d)", job_id, len(requests))
            except Exception as error:
                outcomes[job_id], terminal[job_id] = conclude_error(context, job_id, error, monitor)
    finally:
        for job_id, monitor in monitors.items():
            monitor.stop()
            _clean_up(context, job_id, context.work_dir(job_id), terminal[job_id])
    return outcomes


def _fail(context: WorkerContext, job_id: str, code: str, message: str, monitor: JobMonitor) -> str:
    monitor.stop()
    logger.info("job %s: FAILED %s: %s", job_id, code, message)
    end_owned_job(context, job_id, JobStatus.FAILED, code, message)
    return "failed"


__all__ = [
    "TRANSIENT_ERRORS",
    "JobMonitor",
    "JobSpec",
    "TransientArtifactError",
    "WorkerContext",
    "claim_job",
    "create_worker_context",
    "execute_job",
    "load_spec",
    "materialize",
    "record_success",
    "run_core",
    "schedule_retry",
    "worker_identity",
]
