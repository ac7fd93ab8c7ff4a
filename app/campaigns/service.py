"""Recycling policies and campaigns: the rules of automatic recycling on a model upgrade.

A campaign recycles the READY adapters of version A of a model for version B. Per adapter:

1. a ``compatibility`` job (A0 on B without training). FAILED (e.g. an incompatible adapter):
   that adapter ends ``failed`` with the job's reason; the others go on.
2. retention ≥ ``gates.direct_min_retention``: the adapter is registered on B as is
   (method ``direct``) and the ``production`` alias of its task on B moves to it. Otherwise
   one ``recycle`` job per policy method, plus ``fresh`` when the baseline is on.
3. once every recycle job of the adapter is terminal: steps to target and speedup against the
   fresh baseline (``recycling_core.metrics.convergence``), the best method by test metric,
   the gates (``recycled_min_metric``, ``must_beat_fresh``); the best is promoted (alias move)
   when it passes; one ``interpolation`` job (model mode, A0 on A vs the best on B).
4. when every adapter is done the campaign ends SUCCEEDED (no adapter failed), PARTIAL (some
   did) or FAILED (all did), with a summary.

:func:`advance_campaign` is level-triggered and idempotent: it recomputes the next step from the
jobs and rows that exist, under a lock on the campaign row, and every job it creates has a
unique ``(campaign_id, campaign_key)``. It runs after each of the campaign's jobs ends (in its
own transaction), and periodically from the reaper, so a step lost to a crash is taken later
and a job that finishes twice never enqueues anything twice.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.adapters import service as adapters_service
from app.campaigns.repository import CampaignQuery, CampaignRepository
from app.campaigns.schemas import CampaignCreate, Gates, PolicyIn
from app.context import context_of
from app.db import (
    Adapter,
    AdapterStatus,
    Campaign,
    CampaignStatus,
    Job,
    JobKind,
    JobStatus,
    ModelVersion,
    Policy,
    RegisteredModel,
    VersionStatus,
    utcnow,
)
from app.db.session import call_after_commit, transaction
from app.errors import AppError, BadRequest, NotFound
from app.events import ModelVersionRegistered, record_event, subscribe
from app.jobs import service as jobs_service
from app.jobs.repository import JobRepository
from app.jobs.schemas import InterpolationJobParams, RecycleJobParams, TrainingParams
from app.jobs.service import JobFinished, JobRetried
from app.models import service as models_service
from app.pagination import Paged, Pagination
from app.settings import Settings, get_settings
from app.storage import ArtifactStore
from recycling_core.metrics.convergence import convergence_metrics, default_target, steps_to_target
from recycling_core.reports import ConvergenceMetrics
from recycling_core.reports import Report as ReportDocument

logger = logging.getLogger(__name__)

PROMOTION_ALIAS = "production"
FRESH = "fresh"
DIRECT = "direct"

DEFAULT_POLICY = PolicyIn()
"""Auto on, methods [init], step budget 200, fresh baseline on, direct_min_retention 0.98."""


@dataclass(frozen=True)
class AdapterPromoted:
    """A campaign moved the ``production`` alias of a task on the new version to an adapter."""

    campaign_id: str
    adapter_id: str
    source_adapter_id: str
    method: str
    model_version_id: int
    task_id: int


@dataclass(frozen=True)
class CampaignFinished:
    campaign_id: str
    status: CampaignStatus
    summary: dict[str, Any]


@dataclass(frozen=True)
class PolicyView:
    model: RegisteredModel
    values: PolicyIn
    row: Policy | None


@dataclass(frozen=True)
class CampaignView:
    campaign: Campaign
    from_version: ModelVersion
    to_version: ModelVersion
    jobs: list[Job] = field(default_factory=list)


# --------------------------------------------------------------------------- policies


def _policy_values(row: Policy | None) -> PolicyIn:
    if row is None:
        return DEFAULT_POLICY
    return PolicyIn.model_validate(
        {
            "methods": row.methods,
            "step_budget": row.step_budget,
            "few_shot": row.few_shot,
            "fresh_baseline": row.fresh_baseline,
            "gates": row.gates or {},
            "training": row.training or {},
            "auto_campaign": row.auto_campaign,
        }
    )


def get_policy(session: Session, model_name: str) -> PolicyView:
    """The model's policy, or the defaults when none was set."""
    model = models_service.get_model(session, model_name)
    row = CampaignRepository(session).get_policy(model.id)
    return PolicyView(model, _policy_values(row), row)


def _check_training(values: PolicyIn | CampaignCreate) -> None:
    training = values.training
    if training is not None and training.steps is not None:
        raise BadRequest(
            "set the number of steps with step_budget, not training.steps", code="InvalidPolicy"
        )


def set_policy(session: Session, model_name: str, values: PolicyIn) -> PolicyView:
    """Create or replace the model's policy."""
    model = models_service.get_model(session, model_name)
    _check_training(values)
    jobs_service.training_config({**values.training.overrides(), "steps": values.step_budget})
    repository = CampaignRepository(session)
    row = repository.get_policy(model.id)
    if row is None:
        row = Policy(model_id=model.id, created_at=utcnow())
    row.methods = list(values.methods)
    row.step_budget = values.step_budget
    row.few_shot = values.few_shot
    row.fresh_baseline = values.fresh_baseline
    row.gates = values.gates.model_dump()
    row.training = values.training.overrides()
    row.auto_campaign = values.auto_campaign
    row.updated_at = utcnow()
    repository.add_policy(row)
    return PolicyView(model, _policy_values(row), row)


def _snapshot(values: PolicyIn) -> dict[str, Any]:
    return {
        "methods": list(values.methods),
        "step_budget": values.step_budget,
        "few_shot": values.few_shot,
        "fresh_baseline": values.fresh_baseline,
        "gates": values.gates.model_dump(),
        "training": values.training.overrides(),
    }


# --------------------------------------------------------------------------- start


def _settings(session: Session) -> Settings:
    context = context_of(session)
    return context.settings if context is not None else get_settings()


def start_campaign(
    session: Session,
    *,
    model: RegisteredModel,
    from_version: ModelVersion,
    to_version: ModelVersion,
    policy: dict[str, Any],
    adapters: list[Adapter],
    trigger: str,
    settings: Settings | None = None,
) -> Campaign:
    """Create a RUNNING campaign and queue a compatibility job per adapter."""
    settings = settings or _settings(session)
    now = utcnow()
    campaign = Campaign(
        model_id=model.id,
        from_version_id=from_version.id,
        to_version_id=to_version.id,
        policy={**policy, "adapter_ids": [adapter.id for adapter in adapters]},
        trigger=trigger,
        status=CampaignStatus.RUNNING,
        summary={},
        created_at=now,
        started_at=now,
    )
    CampaignRepository(session).add(campaign)
    advance_campaign(session, campaign.id, settings=settings)  # queues the compatibility jobs
    return campaign


def create_campaign(session: Session, settings: Settings, request: CampaignCreate) -> Campaign:
    """A campaign started by hand: the model's policy, overridden by the request's fields."""
    model = models_service.get_model(session, request.model)
    if request.from_version == request.to_version:
        raise BadRequest("from_version and to_version must differ", code="SameVersion")
    from_version = _ready_version(session, request.model, request.from_version)
    to_version = _ready_version(session, request.model, request.to_version)
    _check_training(request)
    values = _policy_values(CampaignRepository(session).get_policy(model.id))
    overrides = request.model_dump(
        exclude_none=True,
        include={"methods", "step_budget", "few_shot", "fresh_baseline", "gates", "training"},
    )
    merged = values.model_copy(
        update={
            **{k: v for k, v in overrides.items() if k not in ("gates", "training")},
            **({"gates": request.gates} if request.gates is not None else {}),
            **({"training": request.training} if request.training is not None else {}),
        }
    )
    jobs_service.training_config({**merged.training.overrides(), "steps": merged.step_budget})
    adapters = _campaign_adapters(session, from_version, request.adapter_ids)
    if not adapters:
        raise BadRequest(
            f"version {from_version.version} of {model.name!r} has no READY adapters to recycle",
            code="NoAdapters",
        )
    return start_campaign(
        session,
        model=model,
        from_version=from_version,
        to_version=to_version,
        policy=_snapshot(merged),
        adapters=adapters,
        trigger="manual",
        settings=settings,
    )


def _ready_version(session: Session, model_name: str, number: int) -> ModelVersion:
    version = models_service.get_version(session, model_name, number)
    if version.status != VersionStatus.READY:
        raise BadRequest(
            f"version {number} of {model_name!r} is {version.status}", code="VersionNotReady"
        )
    return version


def _campaign_adapters(
    session: Session, from_version: ModelVersion, adapter_ids: list[str] | None
) -> list[Adapter]:
    ready = CampaignRepository(session).ready_adapters(from_version.id)
    if adapter_ids is None:
        return ready
    by_id = {adapter.id: adapter for adapter in ready}
    chosen = []
    for adapter_id in dict.fromkeys(adapter_ids):
        if adapter_id not in by_id:
            adapter = adapters_service.get_adapter(session, adapter_id)  # 404 when unknown
            raise BadRequest(
                f"adapter {adapter_id} is not a READY adapter of version {from_version.version} "
                f"(it is {adapter.status} on model version id {adapter.model_version_id})",
                code="AdapterNotInVersion",
            )
        chosen.append(by_id[adapter_id])
    return chosen


def on_version_registered(session: Session, event: ModelVersionRegistered) -> None:
    """Start the automatic campaign of an upgrade when the model's policy asks for it."""
    if event.parent_version_id is None:
        return
    repository = CampaignRepository(session)
    values = _policy_values(repository.get_policy(event.model_id))
    if not values.auto_campaign:
        return
    versions = repository.versions(event.parent_version_id, event.model_version_id)
    parent, version = versions[event.parent_version_id], versions[event.model_version_id]
    adapters = repository.ready_adapters(parent.id)
    if not adapters:
        logger.info(
            "%s v%d: no READY adapters on v%d, no campaign",
            version.model.name,
            version.version,
            parent.version,
        )
        return
    campaign = start_campaign(
        session,
        model=version.model,
        from_version=parent,
        to_version=version,
        policy=_snapshot(values),
        adapters=adapters,
        trigger="auto",
    )
    logger.info(
        "campaign %s: %s v%d → v%d, %d adapters",
        campaign.id,
        version.model.name,
        parent.version,
        version.version,
        len(adapters),
    )


# --------------------------------------------------------------------------- read


def get_campaign(session: Session, campaign_id: str) -> CampaignView:
    repository = CampaignRepository(session)
    campaign = repository.get(campaign_id)
    if campaign is None:
        raise NotFound(f"campaign {campaign_id!r} does not exist", code="CampaignNotFound")
    versions = repository.versions(campaign.from_version_id, campaign.to_version_id)
    jobs = JobRepository(session).campaign_jobs(campaign.id)
    return CampaignView(
        campaign, versions[campaign.from_version_id], versions[campaign.to_version_id], jobs
    )


def list_campaigns(
    session: Session,
    page: Pagination,
    *,
    model: str | None = None,
    status: CampaignStatus | None = None,
) -> Paged[CampaignView]:
    """Campaigns, newest first."""
    model_id = None
    if model is not None:
        try:
            model_id = models_service.get_model(session, model).id
        except NotFound:
            return Paged([], 0, page)
    repository = CampaignRepository(session)
    rows, total = repository.page(CampaignQuery(model_id=model_id, status=status), page)
    ids = {row.from_version_id for row in rows} | {row.to_version_id for row in rows}
    versions = repository.versions(*ids) if ids else {}
    views = [
        CampaignView(row, versions[row.from_version_id], versions[row.to_version_id])
        for row in rows
    ]
    return Paged(views, total, page)


# --------------------------------------------------------------------------- the state machine


def _compatibility_key(adapter_id: str) -> str:
    return f"compatibility:{adapter_id}"


def _recycle_key(adapter_id: str, method: str) -> str:
    return f"recycle:{adapter_id}:{method}"


def _interpolation_key(adapter_id: str) -> str:
    return f"interpolation:{adapter_id}"


def _compatibility_job(
    session: Session, settings: Settings, campaign: Campaign, adapter_id: str
) -> Job:
    params = jobs_service.compatibility_params(
        session,
        jobs_service.CompatibilityJobParams(
            adapter_id=adapter_id, to_version_id=campaign.to_version_id
        ),
    )
    return jobs_service.add_job(
        session,
        settings,
        JobKind.COMPATIBILITY,
        params,
        campaign_id=campaign.id,
        campaign_key=_compatibility_key(adapter_id),
    )


@dataclass
class _Step:
    """What one pass over the campaign knows and does."""

    session: Session
    settings: Settings
    campaign: Campaign
    jobs: dict[str, Job]
    reports: dict[str, dict[str, Any]]
    previous: dict[str, Any]

    def job(self, key: str) -> Job | None:
        return self.jobs.get(key)

    def report(self, job: Job | None) -> ReportDocument | None:
        if job is None or job.result_report_id is None:
            return None
        document = self.reports.get(job.result_report_id)
        return ReportDocument.model_validate(document) if document is not None else None

    def add_job(self, kind: JobKind, key: str, params: dict[str, Any]) -> Job:
        job = jobs_service.add_job(
            self.session,
            self.settings,
            kind,
            params,
            campaign_id=self.campaign.id,
            campaign_key=key,
        )
        self.jobs[key] = job
        return job


def advance_campaign(
    session: Session, campaign_id: str, *, settings: Settings | None = None
) -> Campaign | None:
    """Take every step the campaign's state allows now (idempotent; locks the campaign row)."""
    repository = CampaignRepository(session)
    campaign = repository.lock(campaign_id)
    if campaign is None or campaign.status.is_terminal:
        return campaign
    settings = settings or _settings(session)
    jobs = {
        job.campaign_key: job
        for job in JobRepository(session).campaign_jobs(campaign.id)
        if job.campaign_key
    }
    report_rows = repository.reports(
        [job.result_report_id for job in jobs.values() if job.result_report_id]
    )
    step = _Step(
        session=session,
        settings=settings,
        campaign=campaign,
        jobs=jobs,
        reports={report_id: row.document for report_id, row in report_rows.items()},
        previous=dict((campaign.summary or {}).get("adapters", {})),
    )
    adapter_ids: list[str] = list(campaign.policy.get("adapter_ids", []))
    sources = repository.adapters(adapter_ids)
    entries: dict[str, dict[str, Any]] = {}
    for adapter_id in adapter_ids:
        entry = _adapter_entry(step.previous.get(adapter_id), adapter_id, sources.get(adapter_id))
        try:
            _advance_adapter(step, entry, sources.get(adapter_id))
        except AppError as error:  # e.g. the source adapter or a version was deleted meanwhile
            logger.warning("campaign %s, adapter %s: %s", campaign.id, adapter_id, error)
            entry.update(stage="done", outcome="failed", error=f"{error.code}: {error.detail}")
        entries[adapter_id] = entry
    summary = _summary(entries)
    campaign.summary = summary
    if all(entry["stage"] == "done" for entry in entries.values()):
        _finish(session, campaign, entries)
    session.flush()
    return campaign


def _adapter_entry(
    previous: dict[str, Any] | None, adapter_id: str, source: Adapter | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "adapter_id": adapter_id,
        "task_id": source.task_id if source is not None else None,
        "task": source.task.name if source is not None else None,
        "stage": "compatibility",
        "outcome": "pending",
        "compatibility": None,
        "decision": None,
        "methods": {},
        "best": None,
        "gates": None,
        "promotion": None,
        "interpolation": None,
        "error": None,
    }
    if previous and previous.get("promotion"):
        entry["promotion"] = previous["promotion"]  # promotions happen once; keep the record
    return entry


def _job_ref(job: Job) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "status": job.status.value,
        "error": f"{job.error_code}: {job.error_message}"
        if job.status == JobStatus.FAILED
        else None,
    }


def _advance_adapter(step: _Step, entry: dict[str, Any], source: Adapter | None) -> None:
    adapter_id = entry["adapter_id"]
    campaign = step.campaign
    compat = step.job(_compatibility_key(adapter_id))
    if compat is None:
        if source is None or source.deleted_at is not None or source.status != AdapterStatus.READY:
            entry.update(
                stage="done", outcome="failed", error="the source adapter is no longer READY"
            )
            return
        compat = _compatibility_job(step.session, step.settings, campaign, adapter_id)
        step.jobs[_compatibility_key(adapter_id)] = compat
    entry["compatibility"] = _job_ref(compat)
    if not compat.status.is_terminal:
        return
    if compat.status != JobStatus.SUCCEEDED:
        entry.update(
            stage="done",
            outcome="failed",
            error=f"compatibility {compat.status.value.lower()}: "
            f"{compat.error_code}: {compat.error_message}",
        )
        return
    report = step.report(compat)
    metrics = report.metrics.compatibility if report is not None else None
    if metrics is None:
        entry.update(stage="done", outcome="failed", error="the compatibility job left no report")
        return
    entry["compatibility"].update(
        source=metrics.source,
        direct=metrics.direct,
        retention=metrics.retention,
        negative_flip_rate=metrics.negative_flip_rate,
        agreement=metrics.agreement,
        metric=metrics.metric_name,
    )
    assert source is not None
    gates = Gates(**campaign.policy.get("gates", {}))
    if gates.direct_min_retention is not None and metrics.retention >= gates.direct_min_retention:
        entry["decision"] = DIRECT
        _promote_direct(step, entry, source, compat, metrics.direct)
        return
    entry["decision"] = "recycle"
    entry["stage"] = "recycling"
    _advance_recycling(step, entry, source)


def _methods(policy: dict[str, Any]) -> list[str]:
    methods = list(policy.get("methods", []))
    if policy.get("fresh_baseline") and FRESH not in methods:
        methods.append(FRESH)
    return methods


def _recycle_params(step: _Step, source: Adapter, method: str) -> dict[str, Any]:
    policy = step.campaign.policy
    training = TrainingParams(**{**policy.get("training", {}), "steps": policy["step_budget"]})
    return jobs_service.recycle_params(
        step.session,
        RecycleJobParams(
            adapter_id=source.id,
            to_version_id=step.campaign.to_version_id,
            method=method,  # type: ignore[arg-type]
            training=training,
            few_shot=policy.get("few_shot"),
        ),
    )


@dataclass(frozen=True)
class _MethodResult:
    method: str
    job: Job
    report: ReportDocument | None

    @property
    def ok(self) -> bool:
        return self.job.status == JobStatus.SUCCEEDED and self.report is not None

    @property
    def test(self) -> float | None:
        if not self.ok or self.report is None or self.report.metrics.test is None:
            return None
        return self.report.metrics.test.primary


def _advance_recycling(step: _Step, entry: dict[str, Any], source: Adapter) -> None:
    adapter_id = source.id
    results: dict[str, _MethodResult] = {}
    for method in _methods(step.campaign.policy):
        key = _recycle_key(adapter_id, method)
        job = step.job(key) or step.add_job(
            JobKind.RECYCLE, key, _recycle_params(step, source, method)
        )
        results[method] = _MethodResult(method, job, step.report(job))
        entry["methods"][method] = {**_job_ref(job), "adapter_id": job.result_adapter_id}
    if not all(result.job.status.is_terminal for result in results.values()):
        return
    _score_methods(entry, results)
    candidates = [r for m, r in results.items() if m != FRESH and r.ok and r.test is not None]
    if not candidates:
        entry.update(stage="done", outcome="failed", error="no recycling method succeeded")
        return
    best = max(
        candidates,
        key=lambda r: (r.test, -(entry["methods"][r.method].get("steps_to_target") or 10**12)),
    )
    entry["best"] = {
        "method": best.method,
        "adapter_id": best.job.result_adapter_id,
        "test": best.test,
    }
    fresh = results.get(FRESH)
    passed, reasons = _check_gates(step.campaign.policy, best, fresh)
    entry["gates"] = {"passed": passed, "reasons": reasons}
    if passed and entry["promotion"] is None and best.job.result_adapter_id is not None:
        _promote(step, entry, best.job.result_adapter_id, source, best.method)
    entry["outcome"] = "recycled" if passed else "not_promoted"
    _advance_interpolation(step, entry, source, best)


def _score_methods(entry: dict[str, Any], results: dict[str, _MethodResult]) -> None:
    """Test score, steps to target and speedup of every method (DESIGN §6: vs the fresh run)."""
    fresh = results.get(FRESH)
    fresh_curve = fresh.report.curve if fresh is not None and fresh.ok and fresh.report else None
    target: float | None = None
    fresh_steps: int | None = None
    if fresh_curve is not None and fresh_curve.best_metric is not None:
        target, _source = default_target(fresh_best=fresh_curve.best_metric)
        fresh_steps = steps_to_target(fresh_curve.points, target)
    for method, result in results.items():
        row = entry["methods"][method]
        row["test"] = result.test
        if not result.ok or result.report is None:
            continue
        report = result.report
        convergence: ConvergenceMetrics | None
        if target is not None and report.curve is not None:
            convergence = convergence_metrics(report.curve.points, target, "fresh", fresh_steps)
        else:
            convergence = report.metrics.convergence
        if convergence is not None:
            row.update(
                steps_to_target=convergence.steps_to_target,
                target=convergence.target,
                target_source=convergence.target_source,
                speedup=convergence.speedup,
            )


def _check_gates(
    policy: dict[str, Any], best: _MethodResult, fresh: _MethodResult | None
) -> tuple[bool, list[str]]:
    gates = Gates(**policy.get("gates", {}))
    reasons: list[str] = []
    assert best.test is not None
    if gates.recycled_min_metric is not None and best.test < gates.recycled_min_metric:
        reasons.append(
            f"test metric {best.test:.4f} < recycled_min_metric {gates.recycled_min_metric}"
        )
    if gates.must_beat_fresh:
        if fresh is None or fresh.test is None:
            reasons.append("must_beat_fresh: no successful fresh baseline to compare with")
        elif best.test < fresh.test:
            reasons.append(f"test metric {best.test:.4f} < fresh baseline {fresh.test:.4f}")
    return not reasons, reasons


def _advance_interpolation(
    step: _Step, entry: dict[str, Any], source: Adapter, best: _MethodResult
) -> None:
    key = _interpolation_key(source.id)
    job = step.job(key)
    if job is None and best.job.result_adapter_id is not None:
        params = jobs_service.interpolation_params(
            step.session,
            InterpolationJobParams(
                old_adapter_id=source.id, new_adapter_id=best.job.result_adapter_id
            ),
        )
        job = step.add_job(JobKind.INTERPOLATION, key, params)
    if job is None:
        entry["stage"] = "done"
        return
    entry["interpolation"] = _job_ref(job)
    entry["stage"] = "interpolation"
    if not job.status.is_terminal:
        return
    report = step.report(job)
    if report is not None and report.metrics.interpolation is not None:
        curve = report.metrics.interpolation
        entry["interpolation"].update(
            mode=curve.mode,
            loss_barrier=curve.loss_barrier,
            accuracy_barrier=curve.accuracy_barrier,
            connected=curve.connected,
        )
    entry["stage"] = "done"


# --------------------------------------------------------------------------- promotion


def _promote(
    step: _Step, entry: dict[str, Any], adapter_id: str, source: Adapter, method: str
) -> None:
    adapter = adapters_service.update_adapter(
        step.session, adapter_id, add_aliases=[PROMOTION_ALIAS]
    )
    _record_promotion(step, entry, adapter, source, method)


def _record_promotion(
    step: _Step, entry: dict[str, Any], adapter: Adapter, source: Adapter, method: str
) -> None:
    entry["promotion"] = {
        "adapter_id": adapter.id,
        "method": method,
        "alias": PROMOTION_ALIAS,
        "model_version_id": adapter.model_version_id,
        "at": utcnow().isoformat(),
    }
    record_event(
        step.session,
        AdapterPromoted(
            campaign_id=step.campaign.id,
            adapter_id=adapter.id,
            source_adapter_id=source.id,
            method=method,
            model_version_id=adapter.model_version_id,
            task_id=adapter.task_id,
        ),
    )


def _promote_direct(
    step: _Step, entry: dict[str, Any], source: Adapter, compat: Job, direct_score: float
) -> None:
    """Register the outdated adapter on the new version unchanged and move ``production`` to it."""
    repository = CampaignRepository(step.session)
    existing = repository.find_produced_adapter(
        recycled_from_id=source.id,
        model_version_id=step.campaign.to_version_id,
        method=DIRECT,
        job_id=compat.id,
    )
    if existing is None:
        context = context_of(step.session)
        store = context.store if context is not None else ArtifactStore(step.settings.artifact_root)
        existing = _register_direct(step, store, source, compat, direct_score)
        _record_promotion(step, entry, existing, source, DIRECT)
    elif entry["promotion"] is None:
        entry["promotion"] = {
            "adapter_id": existing.id,
            "method": DIRECT,
            "alias": PROMOTION_ALIAS,
            "model_version_id": existing.model_version_id,
        }
    entry["methods"][DIRECT] = {
        "job_id": compat.id,
        "status": "SUCCEEDED",
        "adapter_id": existing.id,
        "test": direct_score,
    }
    entry["best"] = {"method": DIRECT, "adapter_id": existing.id, "test": direct_score}
    entry.update(stage="done", outcome="promoted_direct")


def _register_direct(
    step: _Step, store: ArtifactStore, source: Adapter, compat: Job, direct_score: float
) -> Adapter:
    to_version = models_service.get_version_by_id(
        step.session, step.campaign.to_version_id, require_ready=True
    )
    report = step.report(compat)
    metrics: dict[str, Any] = {"method": DIRECT}
    if report is not None:
        metrics.update(report.metrics.model_dump(mode="json", exclude_none=True))
        metrics["report_id"] = report.report_id
    step.settings.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=step.settings.work_dir, prefix="direct-") as scratch:
        directory = adapters_service.fetch_adapter_directory(
            store, source, Path(scratch) / "adapter"
        )
        return adapters_service.register_adapter_from_directory(
            step.session,
            store,
            directory=directory,
            model_version=to_version,
            task=source.task,
            name=f"{source.task.name}-{DIRECT}",
            metrics=metrics,
            recycled_from=source,
            method=DIRECT,
            job_id=compat.id,
            aliases=[PROMOTION_ALIAS],
            check_compat=False,  # the compatibility job just checked it against this version
            move=True,
        )


# --------------------------------------------------------------------------- end


def _summary(entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    values = list(entries.values())
    return {
        "adapters": entries,
        "totals": {
            "adapters": len(values),
            "done": sum(entry["stage"] == "done" for entry in values),
            "promoted": sum(entry["promotion"] is not None for entry in values),
            "failed": sum(entry["outcome"] == "failed" for entry in values),
        },
    }


def _final_status(entries: dict[str, dict[str, Any]]) -> CampaignStatus:
    failed = sum(entry["outcome"] == "failed" for entry in entries.values())
    if failed == 0:
        return CampaignStatus.SUCCEEDED
    if failed == len(entries):
        return CampaignStatus.FAILED
    return CampaignStatus.PARTIAL


def _finish(session: Session, campaign: Campaign, entries: dict[str, dict[str, Any]]) -> None:
    campaign.status = _final_status(entries)
    campaign.finished_at = utcnow()
    logger.info("campaign %s: %s", campaign.id, campaign.status)
    record_event(session, CampaignFinished(campaign.id, campaign.status, campaign.summary))


# --------------------------------------------------------------------------- triggers


def advance_in_new_transaction(session_factory: Any, campaign_id: str) -> None:
    """One campaign step in a transaction of its own (after the job that triggered it committed)."""
    try:
        with transaction(session_factory) as session:
            advance_campaign(session, campaign_id)
    except Exception:  # the reaper takes the step again on its next pass
        logger.exception("campaign %s: step failed; the reaper will retry it", campaign_id)


def on_job_finished(session: Session, event: JobFinished) -> None:
    """A campaign's job ended: take the campaign's next step once this transaction commits."""
    if event.campaign_id is None:
        return
    context = context_of(session)
    if context is None:
        advance_campaign(session, event.campaign_id)
        return
    call_after_commit(
        session,
        functools.partial(advance_in_new_transaction, context.session_factory, event.campaign_id),
    )


def advance_running_campaigns(session_factory: Any) -> int:
    """The reaper's pass: step every unfinished campaign (catches steps lost to crashes)."""
    with transaction(session_factory) as session:
        campaign_ids = CampaignRepository(session).running_ids()
    for campaign_id in campaign_ids:
        advance_in_new_transaction(session_factory, campaign_id)
    return len(campaign_ids)


def on_job_retried(session: Session, event: JobRetried) -> None:
    """A job of a finished campaign runs again: the campaign is RUNNING until it ends again."""
    if event.campaign_id is None:
        return
    campaign = CampaignRepository(session).lock(event.campaign_id)
    if campaign is not None and campaign.status.is_terminal:
        logger.info("campaign %s: reopened, job %s is retried", campaign.id, event.job_id)
        campaign.status = CampaignStatus.RUNNING
        campaign.finished_at = None


def install() -> None:
    """Subscribe the campaign engine to registry and job events (idempotent)."""
    subscribe(ModelVersionRegistered, on_version_registered)
    subscribe(JobFinished, on_job_finished)
    subscribe(JobRetried, on_job_retried)
