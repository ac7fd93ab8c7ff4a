"""Fixtures and helpers of the job-engine tests (jobs, campaigns, webhooks, reaper).

Import the fixtures into a test module (``from engine_helpers import *``). Messages are not
sent to a broker: a :class:`RecordingDispatcher` keeps them, and :func:`run_sent_jobs` plays
the worker, running each sent job in this process with :func:`execute_job`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from svc_helpers import create_model, create_task, register_adapter, register_version

from app.adapters import service as adapters_service
from app.campaigns import service as campaigns_service
from app.context import install_context
from app.db import Adapter, Job, JobStatus, utcnow
from app.db.session import transaction
from app.events import record_event
from app.jobs.execution import WorkerContext, create_worker_context, execute_job
from app.jobs.service import JobFinished
from app.models import service as models_service
from app.queue import RecordingDispatcher
from app.reports import service as reports_service
from app.tasks import service as tasks_service
from app.webhooks import service as webhooks_service
from recycling_core.reports import (
    CompatibilityMetrics,
    EvalPoint,
    InterpolationMetrics,
    Metrics,
    TaskScore,
    TrainingCurve,
)
from recycling_core.reports import Report as ReportDocument

ENGINE_SETTINGS: dict[str, object] = {
    "reaper_interval_seconds": 0,  # tests call the reaper themselves
    "progress_throttle_seconds": 0,
    "heartbeat_seconds": 600,  # no heartbeat thread writes during a test (one connection on PG)
    "worker_lost_seconds": 1800,
    "queued_redispatch_seconds": 86400,
    "job_retry_backoff_seconds": 0,
    "webhook_backoff_seconds": 0,
    "webhook_max_attempts": 3,
}


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return dict(ENGINE_SETTINGS)


@pytest.fixture
def recorder(app, db, settings, store) -> RecordingDispatcher:  # type: ignore[no-untyped-def]
    """Messages sent after commit land here; the engine runs on the test's session factory."""
    dispatcher = RecordingDispatcher()
    install_context(db.session_factory, settings, store, dispatcher)
    campaigns_service.install()
    webhooks_service.install()
    return dispatcher


@pytest.fixture
def worker(recorder, db, settings, store) -> WorkerContext:  # type: ignore[no-untyped-def]
    return create_worker_context(settings, db.session_factory, store)


def run_sent_jobs(
    worker: WorkerContext, recorder: RecordingDispatcher, *, limit: int = 40
) -> dict[str, str]:
    """Run every job message sent so far, and the ones those runs send, in order."""
    outcomes: dict[str, str] = {}
    index = 0
    while index < len(recorder.jobs):
        assert index < limit, "too many job messages"
        job_id = recorder.jobs[index][0]
        index += 1
        outcomes[job_id] = execute_job(worker, job_id)
    return outcomes


@pytest.fixture
def registry(recorder, client, tiny_model_dir, task_dir, lora_adapter_dir):  # type: ignore[no-untyped-def]
    """Model ``tiny`` v1, task ``topics`` and a plain-PEFT LoRA adapter on v1 (via HTTP)."""
    create_model(client)
    v1 = register_version(client, tiny_model_dir)
    task = create_task(client, task_dir)
    adapter = register_adapter(client, lora_adapter_dir)
    return {"v1": v1, "task": task, "adapter": adapter}


def register_v2(client, model_dir: Path) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return register_version(client, model_dir, parent=1)


def job_rows(db, **where: Any) -> list[Job]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        query = sa.select(Job).order_by(Job.created_at, Job.id)
        for key, value in where.items():
            query = query.where(getattr(Job, key) == value)
        return list(session.scalars(query).all())


def get_job(db, job_id: str) -> Job:  # type: ignore[no-untyped-def]
    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


# --------------------------------------------------------------------------- synthetic outcomes


def compatibility_report(job_id: str, *, source: float, direct: float) -> ReportDocument:
    return ReportDocument(
        kind="compatibility",
        job_id=job_id,
        method="direct",
        metrics=Metrics(
            test=TaskScore(split="test", n=12, loss=1.0, accuracy=direct),
            compatibility=CompatibilityMetrics(
                metric_name="accuracy",
                split="test",
                source=source,
                direct=direct,
                retention=direct / source,
                negative_flip_rate=0.1,
                agreement=0.8,
                floor=0.34,
            ),
        ),
    )


def recycle_report(
    job_id: str, method: str, *, test: float, curve: list[tuple[int, float]]
) -> ReportDocument:
    best_step, best_metric = max(curve, key=lambda point: point[1])
    return ReportDocument(
        kind="recycle",
        job_id=job_id,
        method=method,
        metrics=Metrics(test=TaskScore(split="test", n=12, loss=0.5, accuracy=test)),
        curve=TrainingCurve(
            metric_name="accuracy",
            eval_every=5,
            points=[
                EvalPoint(step=step, metric=metric, loss=1.0 - metric) for step, metric in curve
            ],
            best_step=best_step,
            best_metric=best_metric,
        ),
    )


def interpolation_report(job_id: str) -> ReportDocument:
    return ReportDocument(
        kind="interpolation",
        job_id=job_id,
        metrics=Metrics(
            interpolation=InterpolationMetrics(
                mode="model",
                split="test",
                alphas=[0.0, 0.5, 1.0],
                losses=[1.0, 1.2, 0.8],
                metrics=[0.6, 0.5, 0.7],
                metric_name="accuracy",
                loss_barrier=0.3,
                accuracy_barrier=0.15,
                connected=False,
            )
        ),
    )


def finish_job(
    db,  # type: ignore[no-untyped-def]
    store,
    job_id: str,
    status: JobStatus,
    report: ReportDocument | None = None,
    *,
    adapter_dir: Path | None = None,
    error: str | None = None,
) -> Job:
    """Play the worker's outcome transaction for a job (no ML): rows, events, campaign step."""
    with transaction(db.session_factory) as session:
        job = session.get(Job, job_id, populate_existing=True)
        assert job is not None and not job.status.is_terminal
        adapter: Adapter | None = None
        if adapter_dir is not None:
            source = adapters_service.get_adapter(session, job.params["adapter_id"])
            adapter = adapters_service.register_adapter_from_directory(
                session,
                store,
                directory=adapter_dir,
                model_version=models_service.get_version_by_id(
                    session, job.params["to_version_id"]
                ),
                task=tasks_service.get_task_by_id(session, source.task_id),
                recycled_from=source,
                method=job.params["method"],
                job_id=job.id,
                check_compat=False,
            )
        stored = reports_service.store_report(session, report, job_id=job.id) if report else None
        job.status = status
        job.finished_at = utcnow()
        job.attempts = max(job.attempts, 1)
        job.result_adapter_id = adapter.id if adapter else None
        job.result_report_id = stored.id if stored else None
        if status == JobStatus.FAILED:
            job.error_code, job.error_message = "IncompatibleAdapter", error or "does not fit"
        session.flush()
        record_event(session, JobFinished.of(job))
    return get_job(db, job_id)


CampaignGetter = Callable[[str], dict[str, Any]]
